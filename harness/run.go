package harness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/internal/execute"
	"github.com/runtwice/twice/internal/freshdb"
	"github.com/runtwice/twice/internal/pgserver"
	"github.com/runtwice/twice/internal/record"
)

// heeded leaves out of the volatile "table.column"s those of tables and
// columns the user ignored: they are not compared anyway, and naming them
// only buries the ones that matter.
func heeded(volatile []string, cfg Config) []string {
	var out []string
	for _, v := range volatile {
		table, rest, _ := strings.Cut(v, ".")
		column, _, _ := strings.Cut(rest, ".")
		ignored := slices.Contains(cfg.IgnoreTables, table) || slices.ContainsFunc(cfg.IgnoreColumns, func(ig string) bool {
			// "column" for every table, "table.column", or a path inside
			// a JSON column and everything under it.
			return ig == column || ig == v || strings.HasPrefix(v, ig+".")
		})
		if !ignored {
			out = append(out, v)
		}
	}
	return out
}

// Run checks job: it runs the job once, cleanly, on two fresh databases to
// learn the reference state and which columns are noise, then executes
// every schedule of cfg's faults on a fresh database of its own and compares
// the outcome with the reference. As one shard of several (ShardEnv) it
// executes only that shard's schedules.
//
// A non-nil error means the check itself could not run (no PostgreSQL, bad
// setup SQL, a job that fails on a clean run); findings about the job are
// in the Result. Databases of failed scenarios are kept as evidence until
// Result.DropDatabases.
func Run(ctx context.Context, job Job, cfg Config) (*Result, error) {
	start := time.Now()
	if cfg.Faults != nil && len(cfg.Faults) == 0 {
		return nil, errNoFaults
	}
	r, res, plan, err := begin(ctx, job, cfg)
	if err != nil {
		return nil, err
	}
	defer r.close(context.WithoutCancel(ctx))
	var scheds []faults.Schedule
	for _, f := range cfg.faults() {
		scheds = append(scheds, f.Schedules(plan)...)
	}
	if len(scheds) == 0 {
		return nil, fmt.Errorf("[twice] job %q: Config.Faults gave no scenario for its clean run of %d steps (a fault that needs a commit point, say, on a job without one), so nothing would be checked", job.Name, len(plan.Steps))
	}
	for _, s := range scheds {
		if err := checkSchedule(job.Name, plan.Steps, s); err != nil {
			return nil, err
		}
	}
	if scheds, err = takeShard(scheds, res); err != nil {
		return nil, err
	}
	if p := progressOf(ctx); p != nil {
		p.total.Store(int64(len(scheds)))
	}
	scs, evidence, err := r.scenarios(ctx, scheds, res)
	if err != nil {
		return nil, err
	}
	for i := range scs {
		scs[i].Index = place(res, i)
	}
	res.Scenarios = scs
	if evidence != nil {
		res.kept = append(res.kept, *evidence)
	}
	if err := r.confirmReductions(ctx, plan, res); err != nil {
		return nil, errors.Join(err, res.DropDatabases(ctx))
	}
	if err := checkTookSteps(job.Name, plan.Steps, res.Scenarios); err != nil {
		return nil, errors.Join(err, res.DropDatabases(ctx))
	}
	res.stragglers = r.x.StillRunning()
	res.Duration = time.Since(start)
	res.Status = record.Passed
	switch {
	case res.Idempotent():
	case cfg.ExpectFinding != "":
		res.Status = record.ExpectedFinding
	default:
		res.Status = record.Finding
	}
	return res, nil
}

// begin checks job and cfg, prepares the template database and runs the
// two clean references: it returns a runner ready for scenarios (close
// it), the Result holding the references, and the plan faults expand
// from.
func begin(ctx context.Context, job Job, cfg Config) (_ *runner, _ *Result, _ faults.Plan, err error) {
	var plan faults.Plan
	if err := job.validate(); err != nil {
		return nil, nil, plan, err
	}
	var steps []freshdb.Step
	for _, s := range cfg.Setup {
		if s.err != nil {
			return nil, nil, plan, s.err
		}
		for _, st := range s.steps {
			st.Timeout = cfg.SetupTimeout
			steps = append(steps, st)
		}
	}
	srv, err := pgserver.Shared(ctx)
	if err != nil {
		return nil, nil, plan, err
	}
	tmpl, err := freshdb.Prepare(ctx, srv, steps)
	if err != nil {
		return nil, nil, plan, err
	}
	for _, f := range cfg.Faults {
		if f == nil {
			return nil, nil, plan, errors.New("[twice] Config.Faults holds a nil fault; build faults with the faults package's constructors")
		}
	}
	r := &runner{job: job, cfg: cfg, tmpl: tmpl, srv: srv}
	r.x = execute.New(execute.Settings{
		Job:                       execute.Job{Name: job.Name, Queue: job.Queue},
		Server:                    srv,
		DeliveryTimeout:           cfg.deliveryTimeout(),
		VisibilityTimeout:         r.visibilityTimeout(),
		RedriveAfter:              r.redriveAfter(),
		CancelAtVisibilityTimeout: cfg.CancelAtVisibilityTimeout,
	})
	defer func() {
		if err != nil {
			r.close(context.WithoutCancel(ctx))
		}
	}()
	res := &Result{Result: record.Result{Job: job.Name, ExpectFinding: cfg.ExpectFinding}}

	// Two clean runs, each on a database of its own; the second only
	// tells noise from state. They run one after the other: side by
	// side, the wall-clock values of the two (now(), clock_timestamp())
	// could fall on the same microsecond, and a column that differs on
	// every later run would pass for state (CI saw created_at DEFAULT
	// now() equal in both).
	var refs [2]*assert.Snapshot
	var fx [2][]assert.Effect
	var refSteps [2][]faults.Step
	var errs [2]error
	for i := range refs {
		refs[i], refSteps[i], fx[i], errs[i] = r.reference(ctx, i+1)
		if errs[i] != nil {
			break
		}
	}
	if err := errors.Join(errs[:]...); err != nil {
		// The run that failed may have been making its database when the
		// server stopped, not running the handler.
		for _, err := range errs {
			if errors.Is(err, execute.ErrServerWentAway) {
				return nil, nil, plan, err
			}
		}
		if gone := r.serverGone(ctx); gone != nil {
			return nil, nil, plan, fmt.Errorf("[twice] internal: %w during job %q's clean reference runs (%w): %w", execute.ErrServerWentAway, r.job.Name, gone, err)
		}
		for _, err := range errs {
			if err != nil {
				return nil, nil, plan, err
			}
		}
	}
	steps1 := refSteps[0]
	if err := checkIgnored(cfg, refs[0]); err != nil {
		return nil, nil, plan, err
	}
	res.Reference = refs[0]
	res.Volatile = heeded(assert.VolatileColumns(refs[0], refs[1]), cfg)
	res.ReferenceEffects = fx[0]
	res.VolatileEffects = assert.VolatileEffects(fx[0], fx[1])
	res.Steps = steps1

	plan = faults.Plan{Steps: steps1, VisibilityTimeout: r.visibilityTimeout(), RedriveAfter: cfg.RedriveAfter, MaxInterleavings: cfg.MaxInterleavings,
		OneDeliveryAtATime: job.Queue != nil && job.Queue.Rules().OneDeliveryAtATime}
	return r, res, plan, nil
}

// scenarios is the one scenario worker pool of Run and Explore: it runs
// scheds, r.parallel() at a time, each on a fresh database of its own,
// and returns their scenarios by index. Its one evidence rule: the
// database of the first scenario to fail is kept, and returned with its
// index in scheds; every other is given back at once, since keeping each
// would cost a fresh clone per failed scenario. The first error stops
// the pool: no schedule starts after it, the running ones are cancelled,
// and that error alone is returned (with the evidence given back): an
// error is the harness's own breakage, and the ones it causes in the
// cancelled scenarios would only bury it.
func (r *runner) scenarios(ctx context.Context, scheds []faults.Schedule, res *Result) ([]Scenario, *kept, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	out := make([]Scenario, len(scheds))
	var mu sync.Mutex // guards evidence
	var evidence *kept
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(r.parallel(), len(scheds)) {
		wg.Go(func() {
			for i := range next {
				sc, db, err := r.scenario(ctx, scheds[i], res)
				if err == nil && db != nil {
					mu.Lock()
					keep := evidence == nil
					if keep {
						evidence = &kept{scenario: i, db: db}
					}
					mu.Unlock()
					if !keep {
						err = r.giveBack(ctx, db)
						sc.Database = ""
					}
				}
				if err != nil {
					cancel(err)
				}
				out[i] = sc
				if p := progressOf(ctx); p != nil {
					p.done.Add(1)
				}
			}
		})
	}
	for i := range scheds {
		select {
		case next <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		if evidence != nil {
			err = errors.Join(err, r.giveBack(context.WithoutCancel(ctx), evidence.db))
		}
		return nil, nil, err
	}
	return out, evidence, nil
}

func (j Job) validate() error {
	switch {
	case j.Name == "":
		return errors.New("[twice] Job.Name is empty; name the job so reports can refer to it")
	case j.Handler == nil && j.NewWorker == nil:
		return fmt.Errorf("[twice] job %q has neither Handler nor NewWorker; set one", j.Name)
	case j.Handler != nil && j.NewWorker != nil:
		return fmt.Errorf("[twice] job %q sets both Handler and NewWorker; set one", j.Name)
	}
	return nil
}

// visibilityTimeout is when a job that was not acked is handed out again:
// the queue's rule when it has one, else Config.VisibilityTimeout.
// parallel is how many scenarios run at once: Config.Parallel, or one
// when the queue asks for that (QueueRules.OneScenarioAtATime).
func (r *runner) parallel() int {
	if r.job.Queue != nil && r.job.Queue.Rules().OneScenarioAtATime {
		return 1
	}
	return r.cfg.parallel()
}

func (r *runner) visibilityTimeout() time.Duration {
	if r.job.Queue != nil {
		if d := r.job.Queue.Rules().Redeliver; d > 0 {
			return d
		}
	}
	return r.cfg.visibilityTimeout()
}

// redriveAfter is how long after a crash the redrive fault hands the job
// out again.
func (r *runner) redriveAfter() time.Duration {
	return cmp.Or(r.cfg.RedriveAfter, faults.DefaultRedriveAfter)
}

type runner struct {
	job  Job
	cfg  Config
	tmpl *freshdb.Template
	srv  *pgserver.Server
	x    *execute.Executor // runs each schedule

	shifted shiftedRefs // clean runs at a later clock; see referenceAt
	asked   askedSteps  // steps of overlapping deliveries; see confirmReductions
}

func (r *runner) close(ctx context.Context) {
	r.x.Close(ctx)
}

// giveBack gives db back after a scenario or a clean run (Executor.GiveBack).
func (r *runner) giveBack(ctx context.Context, db *freshdb.Database) error {
	return r.x.GiveBack(ctx, db)
}

// serverGone asks the server, on a new connection, whether it still
// answers: a handler's error while it shuts down is not the job's.
func (r *runner) serverGone(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.srv.ConnString(""))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(ctx) }()
	return conn.Ping(ctx)
}

// newWorker builds a worker, turning a factory's panic or nil into an error.
func (r *runner) newWorker() (h Handler, err error) {
	if r.job.Handler != nil {
		return r.job.Handler, nil
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("job %q: NewWorker panicked: %v\n%s", r.job.Name, p, debug.Stack())
		}
	}()
	h = r.job.NewWorker()
	if h == nil {
		return nil, fmt.Errorf("job %q: NewWorker returned a nil Handler", r.job.Name)
	}
	return h, nil
}

// reference runs one clean delivery on a fresh database and returns its
// state and the steps it took.
func (r *runner) reference(ctx context.Context, n int) (_ *assert.Snapshot, _ []faults.Step, _ []assert.Effect, err error) {
	db, err := r.tmpl.Fresh(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	defer func() { err = errors.Join(err, r.giveBack(context.WithoutCancel(ctx), db)) }()
	ex, err := r.clean(ctx, db, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	d := ex.Deliveries[0]
	if err := ex.effects.err(); err != nil {
		return nil, nil, nil, err
	}
	if why := ex.CleanFailure; why != "" {
		if err := r.serverGone(ctx); err != nil {
			return nil, nil, nil, fmt.Errorf("[twice] internal: %w during job %q's clean reference run %d (%w), so the job's error says nothing about the job: %s", execute.ErrServerWentAway, r.job.Name, n, err, why)
		}
		return nil, nil, nil, fmt.Errorf("[twice] job %q failed on its clean reference run %d, so there is nothing to compare with: %s", r.job.Name, n, why)
	}
	snap, err := ex.Snapshot(ctx)
	return snap, d.Steps, ex.effects.effects(), err
}

// clean runs the job once, cleanly, its clock started shift after
// Config.ClockStart. With a queue the queue's own rounds follow (a
// snoozed job is handed out again until it completes); see cleanFailure.
func (r *runner) clean(ctx context.Context, db *freshdb.Database, shift time.Duration) (*execution, error) {
	sched := faults.Schedule{Deliveries: []faults.Delivery{{Job: 1, Attempt: 1, Worker: 1, Advance: shift}}}
	return r.execute(ctx, db, sched, r.job.Queue != nil)
}

// execution is one schedule's run: what the executor says its
// deliveries did, and the effects they made.
type execution struct {
	*execute.Output
	effects *effectLog
}

// execute runs sched on db. The scenario's clock and effect log are made
// here; the executor's NewWorker hook builds, for every delivery, the
// *Delivery the job's handler receives.
func (r *runner) execute(ctx context.Context, db *freshdb.Database, sched faults.Schedule, retries bool) (*execution, error) {
	clk := newClock(r.cfg.clockStart())
	log := newEffectLog(clk, r.cfg.PaymentKeyWindow)
	out, err := r.x.Run(ctx, execute.Input{Schedule: sched, DB: db, Retries: retries, Clock: clk,
		NewWorker: func() (execute.Handler, error) {
			h, err := r.newWorker()
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, env execute.Env) error { return h(ctx, newDelivery(env, clk, log)) }, nil
		}})
	if err != nil {
		return nil, err
	}
	return &execution{Output: out, effects: log}, nil
}

// newDelivery is the *Delivery a handler receives for the delivery the
// executor describes in env: its effect fakes record into log and make
// their calls the executor's steps.
func newDelivery(env execute.Env, clk *clock, log *effectLog) *Delivery {
	return &Delivery{JobID: env.JobID, Attempt: env.Attempt, Kind: env.Kind, Queued: env.Queued, DB: env.DB, DSN: env.DSN, clock: clk, sqlDB: env.SQL,
		fx: log.forDelivery(env.Spec.Label(), env.JobID, env.Spec.Attempt, executorSteps{env.Effects})}
}

// executorSteps are the executor's effect steps as the fakes take them.
type executorSteps struct{ s execute.EffectSteps }

func (a executorSteps) beginEffect(ctx context.Context, call faults.Step) (effectFate, error) {
	fate, err := a.s.BeginEffect(ctx, call)
	switch fate {
	case execute.EffectReplyLost:
		return effectReplyLost, err
	case execute.EffectRefused:
		return effectRefused, err
	}
	return effectAnswered, err
}

func (a executorSteps) endEffect(label string) { a.s.EndEffect(label) }

// scenario executes sched on a fresh database. It returns the database when
// it is kept as evidence of a failure.
func (r *runner) scenario(ctx context.Context, sched faults.Schedule, res *Result) (Scenario, *freshdb.Database, error) {
	start := time.Now()
	sc := Scenario{Fault: sched.Fault, Schedule: sched, Verdict: Idempotent}
	db, err := r.tmpl.Fresh(ctx)
	if err != nil {
		return sc, nil, err
	}
	ex, err := r.execute(ctx, db, sched, true)
	if err == nil {
		err = ex.effects.err()
	}
	if err != nil {
		return sc, nil, errors.Join(err, r.giveBack(context.WithoutCancel(ctx), db))
	}
	sc.Order = slices.Clone(ex.Order)
	r.asked.note(sched, ex)
	sc.LockWaits = ex.LockWaits
	for _, d := range ex.Deliveries {
		d.Steps = slices.Clone(d.Steps)
		sc.Deliveries = append(sc.Deliveries, d)
	}
	for _, why := range ex.Incomplete {
		sc.Problems = append(sc.Problems, Problem{Kind: record.DidNotComplete, Detail: why})
	}
	snap, err := ex.Snapshot(ctx)
	if err != nil {
		return sc, nil, errors.Join(err, r.giveBack(context.WithoutCancel(ctx), db))
	}
	refState, refEffects, err := r.referenceAt(ctx, ex.JobStart, res)
	if err != nil {
		return sc, nil, errors.Join(err, r.giveBack(context.WithoutCancel(ctx), db))
	}
	sc.StateDiff, err = assert.DiffState(refState, snap, assert.Options{
		Label:           string(sched.Fault),
		IgnoreTables:    r.cfg.IgnoreTables,
		IgnoreColumns:   r.cfg.IgnoreColumns,
		Volatile:        res.Volatile,
		CmpOptions:      r.cfg.CmpOptions,
		SequenceColumns: r.cfg.SequenceColumns,
	})
	if err != nil {
		return sc, nil, errors.Join(err, r.giveBack(context.WithoutCancel(ctx), db))
	}
	for _, d := range sc.StateDiff {
		sc.Problems = append(sc.Problems, Problem{Kind: record.StateDiffers, Table: d.Table})
	}
	sc.Effects = ex.effects.effects()
	dups, missing := effectWindows(ex.Overlapped, ex.Faulted, sc.Effects)
	sc.EffectDiff = assert.DiffEffects(refEffects, sc.Effects, assert.EffectOptions{
		Label:                 string(sched.Fault),
		Policies:              r.cfg.EffectPolicies,
		IgnoreFields:          r.cfg.IgnoreEffectFields,
		Volatile:              res.VolatileEffects,
		DuplicatesUnavoidable: dups,
		MissingUnavoidable:    missing,
	})
	if sc.EffectDiff != nil {
		sc.Problems = append(sc.Problems, Problem{Kind: record.EffectsDiffer, Missing: sc.EffectDiff.Missing, Extra: sc.EffectDiff.Extra})
	}
	sc.Duration = time.Since(start)
	if len(sc.Problems) == 0 {
		return sc, nil, r.giveBack(ctx, db)
	}
	sc.Verdict = NotIdempotent
	sc.Database = db.DisplayConnString()
	return sc, db, nil
}

// shiftedRefs caches clean runs whose clock started later than
// Config.ClockStart, by how much later.
type shiftedRefs struct {
	mu   sync.Mutex
	runs map[time.Duration]*shiftedRef
}

type shiftedRef struct {
	once    sync.Once
	state   *assert.Snapshot
	effects []assert.Effect
	err     error
}

// referenceAt returns the state and effects of one clean delivery whose
// clock started shift after Config.ClockStart; shift zero is res's
// reference. A job that fails when run cleanly that late has no such
// reference, and the scenario is held to the one at the start.
func (r *runner) referenceAt(ctx context.Context, shift time.Duration, res *Result) (*assert.Snapshot, []assert.Effect, error) {
	if shift == 0 {
		return res.Reference, res.ReferenceEffects, nil
	}
	r.shifted.mu.Lock()
	if r.shifted.runs == nil {
		r.shifted.runs = map[time.Duration]*shiftedRef{}
	}
	run := r.shifted.runs[shift]
	if run == nil {
		run = &shiftedRef{}
		r.shifted.runs[shift] = run
	}
	r.shifted.mu.Unlock()
	run.once.Do(func() {
		run.state, run.effects, run.err = r.referenceShifted(ctx, shift)
	})
	if run.err != nil {
		return nil, nil, run.err
	}
	if run.state == nil {
		return res.Reference, res.ReferenceEffects, nil
	}
	return run.state, run.effects, nil
}

// referenceShifted is a clean run after the clock moved by shift; nil
// state when the job fails then.
func (r *runner) referenceShifted(ctx context.Context, shift time.Duration) (*assert.Snapshot, []assert.Effect, error) {
	db, err := r.tmpl.Fresh(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = r.giveBack(context.WithoutCancel(ctx), db) }()
	ex, err := r.clean(ctx, db, shift)
	if err != nil {
		return nil, nil, err
	}
	if ex.CleanFailure != "" {
		return nil, nil, nil
	}
	snap, err := ex.Snapshot(ctx)
	if err != nil {
		return nil, nil, err
	}
	return snap, ex.effects.effects(), nil
}
