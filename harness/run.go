package harness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/execute"
	"github.com/runtwice/twice/internal/freshdb"
	"github.com/runtwice/twice/internal/pgserver"
	"github.com/runtwice/twice/internal/record"
	"github.com/runtwice/twice/internal/text"
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

// begin checks job and cfg, prepares the template database and runs the
// two clean references: it returns a runner ready for scenarios (close
// it), the Result holding the references, and the plan faults expand
// from.
func begin(ctx context.Context, job Job, cfg Config) (_ *runner, _ *Result, _ faults.Plan, err error) {
	setPhase(ctx, "starting PostgreSQL and the job's setup")
	var plan faults.Plan
	if err := job.validate(); err != nil {
		return nil, nil, plan, blame.User(err)
	}
	if err := checkInputs(cfg); err != nil {
		return nil, nil, plan, blame.User(err)
	}
	// The process's default HTTP client reaches the calling delivery's
	// providers (effects/route.go).
	if err := effects.RouteDefaultTransport(); err != nil {
		return nil, nil, plan, blame.User(err)
	}
	q, rules, err := job.resolveQueue()
	if err != nil {
		return nil, nil, plan, err
	}
	job.Queue = q
	// The queue's schema comes first: the job's own setup may refer to
	// it (a fixture job row, a trigger on the queue's table).
	steps, err := queueSteps(job.Name, q)
	if err != nil {
		return nil, nil, plan, err
	}
	for _, s := range cfg.Setup {
		if s.err != nil {
			return nil, nil, plan, blame.User(s.err)
		}
		for _, st := range s.steps {
			st.Timeout = cfg.SetupTimeout
			steps = append(steps, st)
		}
	}
	// What the user gave is checked before a server starts or a template
	// is built: a misuse fails at once.
	for i, f := range cfg.Faults {
		if f == nil {
			return nil, nil, plan, blame.User(errors.New("Config.Faults holds a nil fault; build faults with the faults package's constructors"))
		}
		if err := f.Validate(); err != nil {
			return nil, nil, plan, blame.User(fmt.Errorf("Config.Faults[%d] (%s): %w", i, f.Name(), err))
		}
	}
	atOnce, err := parallelSetting()
	if err != nil {
		return nil, nil, plan, err
	}
	srv, err := pgserver.Shared(ctx)
	if err != nil {
		return nil, nil, plan, err
	}
	tmpl, err := freshdb.Prepare(ctx, srv, steps)
	if err != nil {
		return nil, nil, plan, err
	}
	r := &runner{job: job, cfg: cfg, rules: rules, tmpl: tmpl, srv: srv, atOnce: atOnce}
	r.x = execute.New(execute.Settings{
		Job:             execute.Job{Name: job.Name, Queue: job.Queue},
		Server:          srv,
		DeliveryTimeout: cfg.deliveryTimeout(),
		Rules:           rules,
	})
	defer func() {
		if err != nil {
			r.close(context.WithoutCancel(ctx))
		}
	}()
	res := &Result{Result: result.Result{Job: job.Name, ExpectFinding: cfg.ExpectFinding}}

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
			return nil, nil, plan, blame.AsInternal(fmt.Errorf("%w during job %q's clean reference runs (%w): %w", execute.ErrServerWentAway, r.job.Name, gone, err))
		}
		for _, err := range errs {
			if err != nil {
				return nil, nil, plan, err
			}
		}
	}
	steps1 := refSteps[0]
	if err := checkIgnored(cfg, refs[0]); err != nil {
		return nil, nil, plan, blame.User(err)
	}
	res.Reference = refs[0]
	res.Volatile = heeded(assert.VolatileColumns(refs[0], refs[1]), cfg)
	res.ReferenceEffects = fx[0]
	res.VolatileEffects = assert.VolatileEffects(fx[0], fx[1])
	res.Steps = steps1
	aligned := refs
	aligned[0], aligned[1] = assert.Align(refs[0], refs[1])
	if d := disagreement(aligned, fx, refSteps); d != nil {
		d.Rows = slices.DeleteFunc(d.Rows, func(c result.RunCounts) bool { return slices.Contains(cfg.IgnoreTables, c.Name) })
		if len(d.Rows) == 0 {
			d.Rows = nil
		}
		if d.Rows != nil || d.Effects != nil || d.StepAt != 0 {
			res.Warnings = append(res.Warnings, result.Warning{Kind: result.CleanRunsDisagree, Disagreement: d})
		}
	}

	plan = faults.Plan{Steps: steps1, VisibilityTimeout: r.visibilityTimeout(),
		OneDeliveryAtATime: rules.OneDeliveryAtATime, Dedup: rules.Dedup, ProducerRetriesWithin: cfg.ProducerRetriesWithin, ProducerTimeout: cfg.ProducerTimeout, QueueStatements: job.Queue != nil,
		StepTimes: cfg.StepTimes}
	for _, f := range cfg.faults() {
		if f.Name() == faults.NameVisibilityTimeout {
			// Where the pause falls is visibility-timeout's alone.
			res.Overlap = plan.Overlap()
		}
	}
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
func (r *runner) scenarios(ctx context.Context, scheds []faults.Schedule, res *Result) ([]result.Scenario, *kept, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	out := make([]result.Scenario, len(scheds))
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

// moreScenarios is scenarios for schedules run after the check's own (a
// confirmation, the orders a reduction left out): they add to the
// progress total.
func (r *runner) moreScenarios(ctx context.Context, scheds []faults.Schedule, res *Result) ([]result.Scenario, *kept, error) {
	if p := progressOf(ctx); p != nil {
		p.total.Add(int64(len(scheds)))
	}
	return r.scenarios(ctx, scheds, res)
}

func (j Job) validate() error {
	switch {
	case j.Name == "":
		return blame.Userf("Job.Name is empty; name the job so reports can refer to it")
	case j.Handler == nil && j.NewWorker == nil:
		return blame.Userf("job %q has neither Handler nor NewWorker; set one", j.Name)
	case j.Handler != nil && j.NewWorker != nil:
		return blame.Userf("job %q sets both Handler and NewWorker; set one", j.Name)
	}
	return nil
}

// parallel is how many scenarios run at once: -twice.parallel, or one
// when the queue asks for that (queue.Rules.OneScenarioAtATime).
func (r *runner) parallel() int {
	if r.rules.OneScenarioAtATime {
		return 1
	}
	return r.atOnce
}

// visibilityTimeout is when a job that was not acked is handed out again:
// the queue's rule (queue.Model's for a job without an adapter).
func (r *runner) visibilityTimeout() time.Duration {
	return cmp.Or(r.rules.Redeliver, faults.DefaultVisibilityTimeout)
}

// askedSteps keeps, by schedule text, what a scenario's first two
// deliveries did: the steps each asked for, in that order (a delivery's
// completed steps are in completion order, which a lock wait can
// change), and whether the queue handed the second one out.
type askedSteps struct {
	mu    sync.Mutex
	steps map[string]asked
}

type asked struct {
	steps     [2][]faults.Step
	handedOut bool // the second delivery was handed out and started
}

// note keeps what ex's first two deliveries did; Explore's schedules are
// never reduced.
func (a *askedSteps) note(sched faults.Schedule, ex *execution) {
	if len(ex.Deliveries) < 2 || sched.Fault == faults.NameExplore {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.steps == nil {
		a.steps = map[string]asked{}
	}
	a.steps[sched.String()] = asked{
		steps:     [2][]faults.Step{ex.Asked[0], ex.Asked[1]},
		handedOut: ex.Started[1],
	}
}

func (a *askedSteps) of(sched faults.Schedule) (asked, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.steps[sched.String()]
	return s, ok
}

type runner struct {
	job   Job // its Queue nil for queue.Model, which the executor models
	cfg   Config
	rules queue.Rules // the queue's timing and tables; see Job.resolveQueue
	tmpl  *freshdb.Template
	work  cleanWork // what the first clean run did; see checkWork
	// written counts, by table and primary key, the writes of the first
	// clean run to each row; see storedResultChanges.
	written map[rowID]int
	// clean is what the first clean run wrote; see culprit.go.
	cleanRec cleanRecord
	srv      *pgserver.Server
	x        *execute.Executor // runs each schedule
	// atOnce is how many scenarios may run at once (-twice.parallel).
	atOnce int

	shifted shiftedRefs // clean runs at a later clock; see referenceAt
	// refClocks are the clocks of the clean reference runs; see
	// cleanRunsSawClock.
	refClocks []*clock
	// cleanLead is how far the clean run's clock moved before its
	// handler ran (a scheduled job's wait); set by reference.
	cleanLead time.Duration
	asked     askedSteps // steps of overlapping deliveries; see confirmReductions
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
	setPhase(ctx, fmt.Sprintf("on clean reference run %d of 2", n))
	db, err := r.tmpl.Fresh(ctx)
	if err != nil {
		return nil, nil, nil, err
	}

	defer func() { err = errors.Join(err, r.giveBack(context.WithoutCancel(ctx), db)) }()
	ex, err := r.clean(ctx, db, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := ex.effects.Err(); err != nil {
		return nil, nil, nil, err
	}
	// The plan is the delivery that ran the handler: a job scheduled for
	// later may be handed out only by a later round of the queue.
	ran := slices.Index(ex.Started, true)
	if ran < 0 {
		return nil, nil, nil, blame.User(fmt.Errorf("job %q: its clean reference run %d never ran the handler, so there is nothing to check: %s", r.job.Name, n, neverRan(ex)))
	}
	d := ex.Deliveries[ran]
	// How long the clean run's clock moved before its handler ran: a
	// scenario's work at JobStart matches a clean run started that much
	// earlier.
	r.cleanLead = 0
	for _, o := range ex.Deliveries[:ran+1] {
		r.cleanLead += o.Delivery.Advance + o.Waited
	}
	if why := ex.CleanFailure; why != "" {
		if err := r.serverGone(ctx); err != nil {
			return nil, nil, nil, blame.AsInternal(fmt.Errorf("%w during job %q's clean reference run %d (%w), so the job's error says nothing about the job: %s", execute.ErrServerWentAway, r.job.Name, n, err, why))
		}
		return nil, nil, nil, blame.User(fmt.Errorf("job %q failed on its clean reference run %d (delivery %s), so there is nothing to compare with: %s", r.job.Name, n, failedDelivery(ex), why))
	}
	r.refClocks = append(r.refClocks, ex.clock)
	snap, err := ex.Snapshot(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	if n == 1 {
		r.work.rows, r.work.known, err = ex.Written(ctx)
		r.work.effects, r.work.steps = len(ex.effects.Effects()), d.Completed()
		if err == nil {
			err = r.noteWrites(ctx, ex)
		}
	}
	return snap, d.Completed(), ex.effects.Effects(), err
}

// cleanWork is what the first clean run did: the rows it wrote (as the
// write history counts them; known is false without one), the effects it
// made and the steps it took.
type cleanWork struct {
	rows    int64
	known   bool
	effects int
	steps   []faults.Step
}

// checkWork refuses a check that proves nothing: its first clean run
// wrote no row and made no effect, and every scenario passed (scenarios
// is what ran), so every fault left the same nothing behind (a fixture
// without the row the job updates, a handler working through a pool of
// its own). A job whose retries did something that was found is not
// silent. A job that rightly does nothing says so in
// Config.ExpectNoWork, and is refused once it does something.
func (r *runner) checkWork(scenarios []result.Scenario) error {
	w := r.work
	if !w.known {
		return nil
	}
	did := w.rows > 0 || w.effects > 0
	silent := !slices.ContainsFunc(scenarios, func(s result.Scenario) bool { return s.Verdict != result.Idempotent })
	switch {
	case !did && silent && r.cfg.ExpectNoWork == "":
		return blame.User(fmt.Errorf("job %q: this check proves nothing: its clean run wrote no row and made no effect, so every fault leaves the same nothing behind and every scenario would pass. %s Give Config.Setup the rows the job works on, or, if the job rightly does nothing here, say why in Config.ExpectNoWork",
			r.job.Name, ranWhat(w.steps)))
	case did && r.cfg.ExpectNoWork != "":
		return blame.User(fmt.Errorf("job %q is marked as doing nothing (Config.ExpectNoWork: %s), but its clean run wrote %d %s and made %d %s: remove Config.ExpectNoWork",
			r.job.Name, r.cfg.ExpectNoWork, w.rows, text.Plural(int(w.rows), "row"), w.effects, text.Plural(w.effects, "effect")))
	}
	return nil
}

// ranWhat says which statements a clean run that wrote nothing ran, or
// that it ran none the harness saw.
func ranWhat(steps []faults.Step) string {
	if len(steps) == 0 {
		return "It ran no statement through its delivery's connections (d.DB, d.DSN, d.SQL()) and made no effect call: if it works through a pool or client of its own, twice sees none of it."
	}
	const most = 5
	var texts []string
	for i, s := range steps {
		if i == most {
			texts = append(texts, fmt.Sprintf("and %d more", len(steps)-most))
			break
		}
		texts = append(texts, "`"+text.OneLine(s.SQL)+"`")
	}
	return fmt.Sprintf("Its %d %s changed no row: %s.", len(steps), text.Plural(len(steps), "statement"), strings.Join(texts, ", "))
}

// neverRan says why a run's queue handed the job out to no delivery: the
// last delivery's reason (the queue's, or "the job is scheduled for +10s
// and was never due").
func neverRan(ex *execution) string {
	why := "the queue did not hand the job out"
	for _, d := range ex.Deliveries {
		if d.NotDelivered != "" {
			why = d.NotDelivered
		}
	}
	return why
}

// clean runs the job once, cleanly, its clock started shift after
// Config.ClockStart. With a queue the queue's own rounds follow (a
// snoozed job is handed out again until it completes); see cleanFailure.
func (r *runner) clean(ctx context.Context, db *freshdb.Database, shift time.Duration) (*execution, error) {
	sched := faults.Schedule{Deliveries: []faults.Scheduled{{Job: 1, Attempt: 1, Worker: 1, Advance: shift}}}
	return r.execute(ctx, db, sched, r.job.Queue != nil)
}

// execution is one schedule's run: what the executor says its
// deliveries did, and the effects they made.
type execution struct {
	*execute.Output
	effects *effects.Log
	clock   *clock
}

// execute runs sched on db. The scenario's clock and effect log are made
// here; the executor's NewWorker hook builds, for every delivery, the
// *Delivery the job's handler receives.
func (r *runner) execute(ctx context.Context, db *freshdb.Database, sched faults.Schedule, retries bool) (*execution, error) {
	clk := newClock(r.cfg.clockStart())
	log, err := effects.NewLog(clk.seenNow, r.cfg.Providers)
	if err != nil {
		return nil, err
	}
	defer func() { _ = log.Close() }() // the deliveries have ended: the providers' servers go; the log stays readable
	out, err := r.x.Run(ctx, execute.Input{Schedule: sched, DB: db, Retries: retries, Clock: clk,
		NewWorker: func() (execute.Handler, error) {
			h, err := r.newWorker()
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, env execute.Env) error {
				d := newDelivery(env, clk, log)
				d.fx.Route() // this is the handler's goroutine
				return h(ctx, d)
			}, nil
		}})
	if err != nil {
		return nil, err
	}
	return &execution{Output: out, effects: log, clock: clk}, nil
}

// newDelivery is the *Delivery a handler receives for the delivery the
// executor describes in env: its effect fakes record into log and make
// their calls the executor's steps.
func newDelivery(env execute.Env, clk *clock, log *effects.Log) *Delivery {
	return &Delivery{JobID: env.JobID, Attempt: env.Attempt, Kind: env.Kind, Queued: env.Queued, DB: env.DB, DSN: env.DSN, clock: clk, sqlDB: env.SQL,
		fx: log.Clients(env.Spec.Label(), env.JobID, env.Spec.Attempt, env.Effects)}
}

// scenario executes sched on a fresh database. It returns the database when
// it is kept as evidence of a failure.
func (r *runner) scenario(ctx context.Context, sched faults.Schedule, res *Result) (result.Scenario, *freshdb.Database, error) {
	start := time.Now()
	sc := result.Scenario{Fault: sched.Fault, Schedule: sched, Verdict: result.Idempotent}
	db, err := r.tmpl.Fresh(ctx)
	if err != nil {
		return sc, nil, err
	}
	ex, err := r.execute(ctx, db, sched, true)
	if err == nil {
		err = ex.effects.Err()
	}
	if err != nil {
		return sc, nil, errors.Join(err, r.giveBack(context.WithoutCancel(ctx), db))
	}
	sc.Order = slices.Clone(ex.Order)
	r.asked.note(sched, ex)
	sc.LockWaits = ex.LockWaits
	sc.Races = slices.Clone(ex.Races)
	sc.Deliveries = append(sc.Deliveries, ex.Deliveries...)
	for _, why := range ex.Incomplete {
		sc.Problems = append(sc.Problems, result.Problem{Kind: result.DidNotComplete, Detail: why})
	}
	for _, d := range ex.Deliveries {
		if len(d.AfterReturn) > 0 {
			sc.Problems = append(sc.Problems, result.Problem{Kind: result.WorkAfterAck, Delivery: d.Delivery.Label(), Calls: d.AfterReturn})
		}
	}
	snap, err := ex.Snapshot(ctx)
	if err != nil {
		return sc, nil, errors.Join(err, r.giveBack(context.WithoutCancel(ctx), db))
	}
	refState, refEffects, err := r.referenceAt(ctx, max(ex.JobStart-r.cleanLead, 0), res)
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
	if cp, ok := errors.AsType[*assert.ComparerPanic](err); ok {
		// The user's option panicked: theirs to fix, named as they wrote it.
		err = blame.User(fmt.Errorf("config: job %q: an option of Config.CmpOptions made go-cmp panic comparing table %q after %s: %v; fix that cmp.Option or drop it", r.job.Name, cp.Table, sched.Fault, cp.Value))
	}
	if err != nil {
		return sc, nil, errors.Join(err, r.giveBack(context.WithoutCancel(ctx), db))
	}
	for _, d := range sc.StateDiff {
		sc.Problems = append(sc.Problems, result.Problem{Kind: result.StateDiffers, Table: d.Table})
	}
	changed, err := r.storedResultChanges(ctx, ex, refState, res.Volatile)
	if err != nil {
		return sc, nil, errors.Join(err, r.giveBack(context.WithoutCancel(ctx), db))
	}
	sc.Problems = append(sc.Problems, changed...)
	if len(sc.StateDiff) > 0 && r.cleanRec.writes != nil {
		hist, _, err := ex.History(ctx)
		if err != nil {
			return sc, nil, errors.Join(err, r.giveBack(context.WithoutCancel(ctx), db))
		}
		sc.Culprits = r.cleanRec.culprits(hist, ex.Deliveries, sc.StateDiff, ex.Overlapped)
	}
	sc.Effects = ex.effects.Effects()
	dups, missing := effectWindows(ex.Overlapped, ex.Faulted, sc.Effects)
	sc.EffectDiff = assert.DiffEffects(refEffects, sc.Effects, assert.EffectOptions{
		Label:                 string(sched.Fault),
		Policies:              r.cfg.EffectPolicies,
		IgnoreFields:          r.cfg.IgnoreEffectFields,
		Volatile:              res.VolatileEffects,
		DuplicatesUnavoidable: dups,
		MissingUnavoidable:    missing,
		Redelivered:           !ex.Overlapped && oneJob(sc.Effects, ex.Deliveries),
	})
	if sc.EffectDiff != nil {
		sc.Problems = append(sc.Problems, result.Problem{Kind: result.EffectsDiffer, Missing: sc.EffectDiff.Missing, Extra: sc.EffectDiff.Extra})
		sc.Culprits = append(sc.Culprits, effectCulprits(sc.EffectDiff, sc.Effects, ex.Deliveries)...)
	}
	lateCopies(sc.Culprits)
	sc.Severity = severity(sc, r.cfg.EffectPolicies)
	sc.Duration = time.Since(start)
	if len(sc.Problems) == 0 {
		return sc, nil, r.giveBack(ctx, db)
	}
	sc.Verdict = result.NotIdempotent
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
// reference, and the scenario is held to the one at the start. So is a
// job whose clean runs never read the clock: run later, it would do
// what it did (see cleanRunsSawClock), and the run would cost a
// scenario.
func (r *runner) referenceAt(ctx context.Context, shift time.Duration, res *Result) (*assert.Snapshot, []assert.Effect, error) {
	if shift == 0 || !r.cleanRunsSawClock() {
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

// cleanRunsSawClock reports whether a clean reference run could have
// told a later clock from the first: its job read the harness clock
// (Delivery.Now, an effect provider), or it has a queue adapter, whose
// due times, leases and unique windows run on that clock. A job that
// reads none runs the same path at any clock; what differs between two
// such runs (now(), random IDs) is noise the two references already
// tell apart. Read when asked, so a read the job made after its
// delivery returned counts from then on.
func (r *runner) cleanRunsSawClock() bool {
	if r.job.Queue != nil || len(r.refClocks) == 0 {
		return true
	}
	for _, c := range r.refClocks {
		if c.seen.Load() > 0 {
			return true
		}
	}
	return false
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
	return snap, ex.effects.Effects(), nil
}

// takeShard returns the schedules of this machine's shard, and records in
// res which shard ran. Unsharded, it returns scheds.
//
// With the twice runner's plan of costs for the check (twice report
// -timings), the schedules are dealt by cost instead, so that the shards'
// wall times come out even: see record.Deal.
func takeShard(ctx context.Context, scheds []faults.Schedule, res *Result) ([]faults.Schedule, error) {
	sh, err := shardSetting()
	if err != nil || sh == nil {
		return scheds, err
	}
	sh.Schedules = len(scheds)
	for _, s := range scheds {
		if !slices.Contains(sh.Faults, s.Fault) {
			sh.Faults = append(sh.Faults, s.Fault)
		}
	}
	res.Shard = sh
	owner, err := dealtByCost(ctx, scheds, sh, res.Job)
	if err != nil {
		return nil, err
	}
	var mine []faults.Schedule
	for i, s := range scheds {
		switch {
		case owner == nil && sh.Has(i):
			mine = append(mine, s)
		case owner != nil && owner[i] == sh.Index-1:
			mine = append(mine, s)
			sh.Dealt = append(sh.Dealt, i)
		}
	}
	return mine, nil
}

// dealtByCost is each schedule's shard (from 0) when the runner's plan
// has the check's costs; nil to deal them in turn.
func dealtByCost(ctx context.Context, scheds []faults.Schedule, sh *result.ShardRun, job string) ([]int, error) {
	p, err := record.ReadPlan()
	if err != nil || p == nil || p.Shards == 0 {
		return nil, err
	}
	if p.Shards != sh.Count {
		return nil, blame.User(fmt.Errorf("the twice runner dealt the checks' costs (%s) to %d shards, but this is shard %s; run twice report -shard with the same count as -timings was planned for", p.From, p.Shards, sh))
	}
	c := p.Check(testOf(ctx), job)
	if c == nil {
		return nil, nil
	}
	faultOf := make([]faults.Name, len(scheds))
	for i, s := range scheds {
		faultOf[i] = s.Fault
	}
	start := c.Loads
	if len(start) != sh.Count {
		start = make([]float64, sh.Count)
	}
	owner, _ := record.Deal(c.ScheduleCosts(faultOf), start)
	return owner, nil
}

// testKey holds, in a check's context, the name of its test.
type testKey struct{}

// withTest is ctx for the check of the named test.
func withTest(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, testKey{}, name)
}

// testOf is the name of the test ctx is a check of; empty for Run called
// outside Check.
func testOf(ctx context.Context) string {
	name, _ := ctx.Value(testKey{}).(string)
	return name
}

// place is the Index of the k-th scenario of res: its place among the
// whole check's schedules.
func place(res *Result, k int) int {
	if res.Shard == nil {
		return k
	}
	return res.Shard.Place(k)
}

// progress counts a Run's scenarios as they finish.
type progress struct {
	total, done atomic.Int64
	stuck       execute.Stuck // what the running scenarios wait on
	// phase is what the check does before its scenarios are counted (its
	// setup, its clean runs, an exploration), for a progress line that
	// says more than "still checking".
	phase atomic.Pointer[string]
}

// setPhase says, for progress, what the check in ctx does now.
func setPhase(ctx context.Context, phase string) {
	if p := progressOf(ctx); p != nil {
		p.phase.Store(&phase)
	}
}

type progressKey struct{}

// progressOf returns the progress counter in ctx, if any.
func progressOf(ctx context.Context) *progress {
	p, _ := ctx.Value(progressKey{}).(*progress)
	return p
}

// Checks that turn a check that would test nothing into an error: each of
// these used to pass in silence.

// errNoFaults: an empty, non-nil Config.Faults would run no scenario.
var errNoFaults = blame.User(errors.New("Config.Faults is empty, so no scenario would run and every job would pass; leave it nil for faults.Default(), or name the faults to run"))

// checkTookSteps refuses a check in which the handler took no step at
// all: not on its clean run, not in any scenario. No statement reached
// PostgreSQL through the delivery and no effect went through its fakes, so
// no fault had anywhere to strike and no difference could show. An error,
// not a finding: the job may well be idempotent, but twice cannot tell. (A
// handler that acts only on a redelivery took steps, and one whose retry
// fails or panics has a finding: neither passes in silence.)
func checkTookSteps(job string, clean []faults.Step, scenarios []result.Scenario) error {
	if len(clean) > 0 {
		return nil
	}
	for _, s := range scenarios {
		if s.Verdict != result.Idempotent {
			return nil // a finding (a retry that panics, say) is not silent
		}
		for _, d := range s.Deliveries {
			if len(d.Steps) > 0 {
				return nil
			}
		}
	}
	return blame.Userf("job %q took no step, on its clean run or in any scenario: no statement reached PostgreSQL through the Delivery's DB, SQL() or DSN and no effect went through d.Mail(), d.Payments() or d.Effect, so there was nothing to break or compare; give the handler the Delivery's connections and fakes", job)
}

// checkSchedule refuses a schedule whose crash or lost reply falls past the
// last step of the job's clean run, or whose effect fault acts on a step
// that is no effect call there: that fault would never happen and the
// scenario would pass as if it had.
func checkSchedule(job string, clean []faults.Step, s faults.Schedule) error {
	steps := len(clean)
	if err := checkOverlap(job, steps, s); err != nil {
		return err
	}
	for _, d := range s.Deliveries {
		switch d.Fault {
		case faults.KindCrash, faults.KindAmbiguous, faults.KindEffectLostReply, faults.KindEffectFailed, faults.KindCrashAfterEffect, faults.KindEffectOutage, faults.KindEffectSlow:
		default:
			continue
		}
		if d.At > steps {
			hint := fmt.Sprintf("use a step from 1 to %d (or !crash alone for after the last step)", steps)
			if d.Fault.OnEffect() {
				hint = effectStepsHint(clean)
			}
			return blame.Userf("schedule %q: %s!%s:%d acts on step %d, but job %q takes %d %s on a clean run, so the fault would never happen; %s", s.String(), d.Label(), d.Fault, d.At, d.At, job, steps, text.Plural(steps, "step"), hint)
		}
		if d.Fault == faults.KindAmbiguous && d.At > 0 && clean[d.At-1].IsEffect() {
			return blame.Userf("schedule %q: %s!%s:%d loses a statement's reply, but step %d of job %q's clean run is an effect call (%s), so the fault would never happen; for a worker that dies right after the provider accepted it, use %s!%s:%d", s.String(), d.Label(), d.Fault, d.At, d.At, job, text.OneLine(clean[d.At-1].SQL), d.Label(), faults.KindCrashAfterEffect, d.At)
		}
		if d.Fault.OnEffect() && d.At > 0 && !clean[d.At-1].IsEffect() {
			return blame.Userf("schedule %q: %s!%s:%d acts on an effect call, but step %d of job %q's clean run is a statement (%s), so the fault would never happen; %s", s.String(), d.Label(), d.Fault, d.At, d.At, job, text.OneLine(clean[d.At-1].SQL), effectStepsHint(clean))
		}
	}
	return nil
}

// checkRedrive refuses a redrive that comes no later than the queue's
// visibility timeout: the queue would have handed the job out again by
// then, so the delivery would be a plain redelivery and no redrive would
// be tested.
func checkRedrive(s faults.Schedule, visibility time.Duration) error {
	if s.Fault != faults.NameRedrive || len(s.Deliveries) == 0 {
		return nil
	}
	if after := s.Deliveries[len(s.Deliveries)-1].Advance; after <= visibility {
		return blame.Userf("faults.Redrive(%s): a redrive comes after the queue's visibility timeout (%s), when the queue would have handed the job out again itself; give a longer after, like faults.DefaultRedriveAfter (%s)", faults.FormatDuration(after), faults.FormatDuration(visibility), faults.FormatDuration(faults.DefaultRedriveAfter))
	}
	return nil
}

// checkOverlap refuses a start or an order no run of the job can
// plausibly reach: a delivery started once another has done more steps
// than the job takes on a clean run, or an order with more places than
// the deliveries take steps, or an order for deliveries that never
// overlap. A delivery may take more steps than the clean run (a retry's
// own path), so up to overlapSlack times as many are accepted; @1:5 on a
// one-step job or 7 places for two one-step deliveries are not.
func checkOverlap(job string, steps int, s faults.Schedule) error {
	takes := fmt.Sprintf("%d %s", steps, text.Plural(steps, "step"))
	overlap := false
	for i, d := range s.Deliveries {
		if d.With == 0 {
			continue
		}
		overlap = true
		if most := overlapSlack * steps; d.After > most {
			return blame.Userf("schedule %q: delivery %d (%s) starts once delivery %d has done %d steps, but job %q takes %s on a clean run, so the deliveries would never overlap; use @%d:0 to @%d:%d (a delivery may take up to %d times the clean run's steps)", s.String(), i+1, d, d.With, d.After, job, takes, d.With, d.With, most, overlapSlack)
		}
	}
	if len(s.Order) == 0 {
		return nil
	}
	if !overlap {
		return blame.Userf("schedule %q: an order interleaves deliveries that overlap, but every delivery here starts after the previous one ended; start one beside another with @delivery:steps (j1a2w2@1:0), or drop the order", s.String())
	}
	if most := overlapSlack * steps * len(s.Deliveries); len(s.Order) > most {
		return blame.Userf("schedule %q: the order has %d places, but its %d deliveries take %d %s in all on a clean run of job %q (%s each); give at most %d (a delivery may take up to %d times the clean run's steps)", s.String(), len(s.Order), len(s.Deliveries), steps*len(s.Deliveries), text.Plural(steps*len(s.Deliveries), "step"), job, takes, most, overlapSlack)
	}
	return nil
}

// overlapSlack is how many times the clean run's steps a delivery may
// take, for checkOverlap.
const overlapSlack = 2

// effectStepsHint names the steps an effect fault can act on.
func effectStepsHint(clean []faults.Step) string {
	var at []string
	for i, st := range clean {
		if st.IsEffect() {
			at = append(at, strconv.Itoa(i+1))
		}
	}
	if len(at) == 0 {
		return "the job makes no effect call on a clean run, so no effect fault applies"
	}
	return fmt.Sprintf("its effect calls are %s %s", text.Plural(len(at), "step"), strings.Join(at, ", "))
}

// checkIgnored refuses IgnoreTables, IgnoreColumns and SequenceColumns
// entries that name no table or column of the clean run's snapshot: a
// typo would leave the intended table compared, or hide nothing while the
// user believes it does. A column is "table.column" or "column" (only the
// first for SequenceColumns); a path into a json or jsonb column
// ("table.column.key") counts when its column is one.
func checkIgnored(cfg Config, ref *assert.Snapshot) error {
	tables := map[string]bool{}
	columns := map[string]string{} // "table.column" and "column" -> type
	for _, t := range ref.Tables {
		tables[t.Name] = true
		for _, c := range t.Columns {
			columns[t.Name+"."+c.Name] = c.Type
			columns[c.Name] = c.Type
		}
	}
	var bad []string
	for _, t := range cfg.IgnoreTables {
		if !tables[t] {
			bad = append(bad, fmt.Sprintf("IgnoreTables: no table %q", t))
		}
	}
	for _, c := range cfg.IgnoreColumns {
		if !knownColumn(c, columns) {
			bad = append(bad, fmt.Sprintf("IgnoreColumns: no column %q", c))
		}
	}
	for _, c := range cfg.SequenceColumns {
		if _, ok := columns[c]; !ok || !strings.Contains(c, ".") {
			bad = append(bad, fmt.Sprintf("SequenceColumns: no column %q (name it \"table.column\")", c))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	have := "it has no table"
	if len(tables) > 0 {
		have = "its tables are " + strings.Join(slices.Sorted(maps.Keys(tables)), ", ")
	}
	return blame.Userf("Config names what the database does not have after a clean run (%s); %s", strings.Join(bad, "; "), have)
}

// knownColumn reports whether c names a column, or a path inside a json or
// jsonb one.
func knownColumn(c string, columns map[string]string) bool {
	if _, ok := columns[c]; ok {
		return true
	}
	for i := len(c) - 1; i > 0; i-- {
		if c[i] != '.' {
			continue
		}
		if typ, ok := columns[c[:i]]; ok && (typ == "json" || typ == "jsonb") {
			return true
		}
	}
	return false
}

// failedDelivery names the delivery of a clean run whose error ended it,
// for the message that says the job failed there.
func failedDelivery(ex *execution) string {
	for _, d := range ex.Deliveries {
		if d.Err != "" {
			return d.Delivery.Label()
		}
	}
	return ex.Deliveries[0].Delivery.Label()
}

// checkInputs refuses configuration and settings that mean nothing before
// anything touches the server: a negative timeout, a -twice.keep or
// TWICE_KEEP that is no boolean (a fault built with an argument that is
// no step, faults.CrashAt(0), is refused by its Validate in begin). Each used to run as something else (a
// crash after the last step, the default) in silence.
func checkInputs(cfg Config) error {
	var bad []string
	for _, d := range []struct {
		name string
		v    time.Duration
		zero string
	}{
		{"SetupTimeout", cfg.SetupTimeout, "2 minutes"},
		{"DeliveryTimeout", cfg.DeliveryTimeout, "30s"},
		{"ProducerRetriesWithin", cfg.ProducerRetriesWithin, "a producer that may retry at any time"},
		{"ProducerTimeout", cfg.ProducerTimeout, "5s"},
	} {
		if d.v < 0 {
			bad = append(bad, fmt.Sprintf("Config.%s is %s; want a positive duration, or zero for %s", d.name, d.v, d.zero))
		}
	}
	for i, st := range cfg.StepTimes {
		if err := st.Validate(); err != nil {
			bad = append(bad, fmt.Sprintf("Config.StepTimes[%d]: %v", i, err))
		}
	}
	switch {
	case cfg.ExpectPattern != "" && cfg.ExpectFinding == "":
		bad = append(bad, fmt.Sprintf("Config.ExpectPattern is %q without Config.ExpectFinding: a pattern is what an expected finding shows", cfg.ExpectPattern))
	case cfg.ExpectPattern != "" && !cfg.ExpectPattern.Known():
		bad = append(bad, fmt.Sprintf("Config.ExpectPattern is %q, which is no pattern of twice's (see result.Pattern)", cfg.ExpectPattern))
	}
	for _, k := range cfg.AcceptWarnings {
		if !slices.Contains(warningKinds, k) {
			bad = append(bad, fmt.Sprintf("Config.AcceptWarnings holds %q, which is no warning of twice's; the ones a check fails on are result.NoStepTaken, result.GoroutineOutlived, result.TransactionLeftOpen and result.CleanRunsDisagree", k))
		}
	}
	if len(bad) > 0 {
		return blame.User(errors.New(strings.Join(bad, "; ")))
	}
	_, err := keepSetting()
	return err
}

// rowID names a row: its table and its primary key.
type rowID struct{ table, key string }

// noteWrites counts the writes of the first clean run ex to each row
// with a primary key, from the write history.
func (r *runner) noteWrites(ctx context.Context, ex *execution) error {
	hist, known, err := ex.History(ctx)
	if err != nil || !known {
		return err
	}
	r.written, r.cleanRec.writes = map[rowID]int{}, hist
	if len(ex.Deliveries) > 0 {
		r.cleanRec.jobID = ex.Deliveries[0].JobID
	}
	for _, w := range hist {
		if w.Key != "" {
			r.written[rowID{w.Table, w.Key}]++
		}
	}
	return nil
}

// storedResultChanges finds, from the scenario's write history, the
// stored results a retry changed where the state diff cannot see it: a
// row the scenario wrote more often than the first clean run did, whose
// volatile column (one that differs between two clean runs, left out
// of the diff) holds another value after the scenario's last write than
// after the writes the clean run makes. paid_at = time.Now() rewritten
// by a redelivery, n = n + a per-process counter: two clean runs call
// such a column noise, and the history shows the retry rewrote it. A row
// written as often as in the clean run keeps its volatile columns out
// (created_at DEFAULT now() on a row inserted once). Only whole columns
// of tables with a primary key are read; the history is read only when
// the check has volatile columns.
func (r *runner) storedResultChanges(ctx context.Context, ex *execution, ref *assert.Snapshot, volatile []string) ([]result.Problem, error) {
	if r.written == nil || len(volatile) == 0 || ref == nil {
		return nil, nil
	}
	cols := map[string][]string{} // table -> its volatile whole columns
	for _, t := range ref.Tables {
		for _, c := range t.Columns {
			if slices.Contains(volatile, t.Name+"."+c.Name) {
				cols[t.Name] = append(cols[t.Name], c.Name)
			}
		}
	}
	if len(cols) == 0 {
		return nil, nil
	}
	hist, known, err := ex.History(ctx)
	if err != nil || !known {
		return nil, err
	}
	byRow := map[rowID][]freshdb.Write{}
	var order []rowID
	for _, w := range hist {
		id := rowID{w.Table, w.Key}
		if w.Key == "" || cols[w.Table] == nil {
			continue
		}
		if byRow[id] == nil {
			order = append(order, id)
		}
		byRow[id] = append(byRow[id], w.Write)
	}
	var out []result.Problem
	for _, id := range order {
		ws := byRow[id]
		k := r.written[id]
		last := ws[len(ws)-1]
		if len(ws) <= k || last.New == nil {
			continue
		}
		before := ws[0].Old // the fixture's row, which the clean run never wrote
		if k > 0 {
			before = ws[k-1].New
		}
		if before == nil {
			continue
		}
		for _, c := range cols[id.table] {
			b, a := jsonText(before[c]), jsonText(last.New[c])
			if b != a {
				out = append(out, result.Problem{Kind: result.StoredResultChanged, Table: id.table, Row: id.key, Column: c, Before: b, After: a})
			}
		}
	}
	return out, nil
}

// effectWindows says which differences in effects a scenario made
// unavoidable, for assert.EffectOptions. overlapped: some of its
// deliveries ran at once. faulted: the labels of the deliveries a crash or
// an ambiguous fault actually hit. log: the scenario's effects.
//
// A duplicate is unavoidable where deliveries overlapped or a faulted
// delivery had made an effect before the fault: its record of the effect
// may have died with it. A missing effect is unavoidable where any
// delivery was faulted: it may have recorded its intent and died before
// the effect. A lost ack makes neither: the delivery finished cleanly.
func effectWindows(overlapped bool, faulted map[string]bool, log []assert.Effect) (duplicates, missing bool) {
	duplicates = overlapped
	for _, e := range log {
		if e.Happened() && faulted[e.Delivery] {
			duplicates = true
		}
	}
	return duplicates, len(faulted) > 0
}

// oneJob reports whether the effects that happened in log were all made
// by deliveries of one job of the schedule: no producer's copy made one,
// even one that reached the queue with the original's ID (a task ID
// free again once its retention ended).
func oneJob(log []assert.Effect, deliveries []result.DeliveryOutcome) bool {
	job := 0
	for _, e := range log {
		if !e.Happened() {
			continue
		}
		for _, d := range deliveries {
			if d.Delivery.Label() != e.Delivery {
				continue
			}
			if job != 0 && d.Delivery.Job != job {
				return false
			}
			job = d.Delivery.Job
		}
	}
	return true
}
