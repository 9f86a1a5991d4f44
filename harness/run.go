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
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/internal/blame"
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
			return nil, blame.User(err)
		}
	}
	if scheds, err = takeShard(scheds, res); err != nil {
		return nil, err
	}
	res.Scenarios = make([]Scenario, len(scheds))
	if p := progressOf(ctx); p != nil {
		p.total.Store(int64(len(scheds)))
	}
	if err := r.scenarios(ctx, scheds, res); err != nil {
		return nil, errors.Join(err, res.DropDatabases(ctx))
	}
	if err := r.confirmReductions(ctx, plan, res); err != nil {
		return nil, errors.Join(err, res.DropDatabases(ctx))
	}
	if err := checkTookSteps(job.Name, plan.Steps, res.Scenarios); err != nil {
		return nil, blame.User(errors.Join(err, res.DropDatabases(ctx)))
	}
	res.stragglers = r.stillRunning()
	res.leftOpen = r.leftOpen.note(job.Name)
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
		return nil, nil, plan, blame.User(err)
	}
	if err := checkInputs(cfg); err != nil {
		return nil, nil, plan, blame.User(err)
	}
	var steps []freshdb.Step
	for _, s := range cfg.Setup {
		if s.err != nil {
			return nil, nil, plan, blame.User(s.err)
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
			return nil, nil, plan, blame.User(errors.New("[twice] Config.Faults holds a nil fault; build faults with the faults package's constructors"))
		}
	}
	r := &runner{job: job, cfg: cfg, tmpl: tmpl, srv: srv}
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
			if errors.Is(err, errServerWentAway) {
				return nil, nil, plan, err
			}
		}
		if gone := r.serverGone(ctx); gone != nil {
			return nil, nil, plan, fmt.Errorf("[twice] internal: %w during job %q's clean reference runs (%w): %w", errServerWentAway, r.job.Name, gone, err)
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

	plan = faults.Plan{Steps: steps1, VisibilityTimeout: r.visibilityTimeout(), RedriveAfter: cfg.RedriveAfter, MaxInterleavings: cfg.MaxInterleavings,
		OneDeliveryAtATime: job.Queue != nil && job.Queue.Rules().OneDeliveryAtATime}
	return r, res, plan, nil
}

// scenarios runs every schedule, r.parallel() at a time, each on a
// fresh database of its own, into res.Scenarios by index.
func (r *runner) scenarios(ctx context.Context, scheds []faults.Schedule, res *Result) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var mu sync.Mutex // guards res.kept
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(r.parallel(), len(scheds)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				sc, db, err := r.scenario(ctx, scheds[i], res)
				if err == nil && db != nil {
					// The first failure's database is the evidence; keeping
					// every one would cost a fresh clone per failed scenario.
					mu.Lock()
					keep := len(res.kept) == 0
					if keep {
						res.kept = append(res.kept, kept{scenario: i, db: db})
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
				sc.Index = place(res, i)
				res.Scenarios[i] = sc
				if p := progressOf(ctx); p != nil {
					p.done.Add(1)
				}
			}
		}()
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
	return context.Cause(ctx)
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

	adminMu sync.Mutex
	admin   *pgx.Conn // asks the server about locks; opened on first use

	shifted    shiftedRefs  // clean runs at a later clock; see referenceAt
	asked      askedSteps   // steps of overlapping deliveries; see reduce.go
	stragglers stragglers   // handler goroutines not waited for; see linger.go
	backends   backendPools // server backends kept per database; see backends.go
	leftOpen   leftOpen     // deliveries that returned with a transaction open; see leftopen.go
}

func (r *runner) close(ctx context.Context) {
	r.backends.close()
	r.adminMu.Lock()
	defer r.adminMu.Unlock()
	if r.admin != nil {
		_ = r.admin.Close(ctx)
		r.admin = nil
	}
}

// connectAdmin opens r.admin, under r.adminMu, if it is not open; what
// says what the harness means to ask the server.
func (r *runner) connectAdmin(ctx context.Context, what string) error {
	if r.admin != nil {
		return nil
	}
	conn, err := pgx.Connect(ctx, r.srv.ConnString(""))
	if err != nil && serverWentAway(err) {
		return fmt.Errorf("[twice] internal: %w: connecting to ask it %s: %w", errServerWentAway, what, err)
	}
	if err != nil {
		return fmt.Errorf("[twice] internal: connecting to ask the server %s: %w", what, err)
	}
	r.admin = conn
	return nil
}

// waitsOnLock asks the server whether backend pid waits for a lock another
// backend holds.
func (r *runner) waitsOnLock(ctx context.Context, pid uint32) (bool, error) {
	r.adminMu.Lock()
	defer r.adminMu.Unlock()
	if err := r.connectAdmin(ctx, "about locks"); err != nil {
		return false, err
	}
	var waits bool
	err := r.admin.QueryRow(ctx, `SELECT cardinality(pg_blocking_pids($1)) > 0`, int32(pid)).Scan(&waits)
	if err != nil && serverWentAway(err) {
		// The server terminates this session first when it shuts down
		// (57P01), often before the delivery sees anything.
		return false, fmt.Errorf("[twice] internal: %w: asking whether backend %d waits on a lock: %w", errServerWentAway, pid, err)
	}
	if err != nil {
		return false, fmt.Errorf("[twice] internal: asking whether backend %d waits on a lock: %w", pid, err)
	}
	return waits, nil
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

// errServerWentAway marks the errors of a check that ran into the
// server stopping: the check could not run, and the job is not to blame.
var errServerWentAway = errors.New("the PostgreSQL server went away")

// serverWentAway reports whether err, from connecting to the server, says
// the server is gone or going: refused, reset, no socket, or shutting down
// (SQLSTATE class 57P). Other server errors (too many clients, a bad
// password) and cancellations are not.
func serverWentAway(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "57P")
	}
	return true
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
	d := ex.deliveries[0]
	if err := ex.effects.err(); err != nil {
		return nil, nil, nil, err
	}
	if why := ex.cleanFailure(); why != "" {
		if err := r.serverGone(ctx); err != nil {
			return nil, nil, nil, fmt.Errorf("[twice] internal: %w during job %q's clean reference run %d (%w), so the job's error says nothing about the job: %s", errServerWentAway, r.job.Name, n, err, why)
		}
		return nil, nil, nil, blame.User(fmt.Errorf("[twice] job %q failed on its clean reference run %d (delivery %s), so there is nothing to compare with: %s", r.job.Name, n, failedDelivery(ex), why))
	}
	snap, err := ex.snapshot(ctx)
	return snap, d.steps, ex.effects.effects(), err
}

// clean runs the job once, cleanly, its clock started shift after
// Config.ClockStart. With a queue the queue's own rounds follow (a
// snoozed job is handed out again until it completes); see cleanFailure.
func (r *runner) clean(ctx context.Context, db *freshdb.Database, shift time.Duration) (*execution, error) {
	sched := faults.Schedule{Deliveries: []faults.Delivery{{Job: 1, Attempt: 1, Worker: 1, Advance: shift}}}
	return r.execute(ctx, db, sched, r.job.Queue != nil)
}

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
	sc.Order = slices.Clone(ex.granted)
	r.asked.note(sched, ex)
	sc.LockWaits = ex.lockWaits
	for _, d := range ex.deliveries {
		out := d.outcome
		out.Steps = slices.Clone(d.steps)
		sc.Deliveries = append(sc.Deliveries, out)
	}
	for _, why := range ex.incomplete() {
		sc.Problems = append(sc.Problems, Problem{Kind: record.DidNotComplete, Detail: why})
	}
	snap, err := ex.snapshot(ctx)
	if err != nil {
		return sc, nil, errors.Join(err, r.giveBack(context.WithoutCancel(ctx), db))
	}
	refState, refEffects, err := r.referenceAt(ctx, ex.jobStart(), res)
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
	dups, missing := effectWindows(ex.overlapped(), ex.faulted(), sc.Effects)
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

func jobID(n int) string { return fmt.Sprintf("twice-job-%d", n) }

// snapshotters holds one assert.Snapshotter per template database, so
// the catalog is read once for all the databases made from it (and again
// after a handler's DDL, which the Snapshotter notices).
var snapshotters sync.Map // *freshdb.Template -> *assert.Snapshotter

// snapshot reads the scenario's tables, on the harness's kept connection to
// the database when there is one (warm caches, one round trip), otherwise
// on a new one.
func snapshot(ctx context.Context, db *freshdb.Database) (*assert.Snapshot, error) {
	s, _ := snapshotters.LoadOrStore(db.Template(), new(assert.Snapshotter))
	snapshotter := s.(*assert.Snapshotter)
	conn := db.KeptConn()
	if conn == nil {
		var err error
		conn, err = pgx.Connect(ctx, db.ConnString)
		if err != nil {
			return nil, fmt.Errorf("[twice] internal: connecting to snapshot %s: %w", db.Name, err)
		}
		defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	}
	snap, err := snapshotter.Take(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("[twice] internal: snapshot of %s: %w", db.Name, err)
	}
	return snap, nil
}
