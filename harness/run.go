package harness

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/internal/freshdb"
	"github.com/runtwice/twice/internal/pgserver"
)

// Run checks job: it runs the job once, cleanly, on two fresh databases to
// learn the reference state and which columns are noise, then executes
// every schedule of cfg's faults on a fresh database of its own and compares
// the outcome with the reference.
//
// A non-nil error means the check itself could not run (no PostgreSQL, bad
// setup SQL, a job that fails on a clean run); findings about the job are
// in the Result. Databases of failed scenarios are kept as evidence until
// Result.DropDatabases.
func Run(ctx context.Context, job Job, cfg Config) (*Result, error) {
	start := time.Now()
	if err := job.validate(); err != nil {
		return nil, err
	}
	var steps []freshdb.Step
	for _, s := range cfg.Setup {
		if s.err != nil {
			return nil, s.err
		}
		steps = append(steps, s.steps...)
	}
	srv, err := pgserver.Shared(ctx)
	if err != nil {
		return nil, err
	}
	tmpl, err := freshdb.Prepare(ctx, srv, steps)
	if err != nil {
		return nil, err
	}
	r := &runner{job: job, cfg: cfg, tmpl: tmpl}
	res := &Result{Job: job.Name, ExpectFinding: cfg.ExpectFinding}

	var refs [2]*assert.Snapshot
	for i := range refs {
		refs[i], err = r.reference(ctx, i+1)
		if err != nil {
			return nil, err
		}
	}
	res.Reference = refs[0]
	res.Volatile = assert.VolatileColumns(refs[0], refs[1])

	for _, f := range cfg.faults() {
		if f == nil {
			return nil, errors.New("[twice] Config.Faults holds a nil fault; build faults with the faults package's constructors")
		}
		for _, sched := range f.Schedules(faults.Plan{}) {
			if err := executable(sched); err != nil {
				return nil, errors.Join(err, res.DropDatabases(ctx))
			}
			sc, db, err := r.scenario(ctx, f.Name(), sched, res)
			if err != nil {
				return nil, errors.Join(err, res.DropDatabases(ctx))
			}
			if db != nil {
				res.kept = append(res.kept, kept{scenario: len(res.Scenarios), db: db})
			}
			res.Scenarios = append(res.Scenarios, sc)
		}
	}
	res.Duration = time.Since(start)
	return res, nil
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

type runner struct {
	job  Job
	cfg  Config
	tmpl *freshdb.Template
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

// reference runs one clean delivery on a fresh database and snapshots it.
func (r *runner) reference(ctx context.Context, n int) (_ *assert.Snapshot, err error) {
	db, err := r.tmpl.Fresh(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, db.Drop(context.WithoutCancel(ctx))) }()
	h, err := r.newWorker()
	if err != nil {
		return nil, fmt.Errorf("[twice] %w", err)
	}
	out := r.deliver(ctx, db, newClock(), h, faults.Delivery{Job: 1, Attempt: 1, Worker: 1})
	if out.Err != "" {
		return nil, fmt.Errorf("[twice] job %q failed on its clean reference run %d, so there is nothing to compare with: %s", r.job.Name, n, out.Err)
	}
	return snapshot(ctx, db)
}

// scenario executes sched on a fresh database. It returns the database when
// it is kept as evidence of a failure.
func (r *runner) scenario(ctx context.Context, fault string, sched faults.Schedule, res *Result) (Scenario, *freshdb.Database, error) {
	start := time.Now()
	sc := Scenario{Fault: fault, Schedule: sched.String(), Verdict: Idempotent}
	db, err := r.tmpl.Fresh(ctx)
	if err != nil {
		return sc, nil, err
	}
	clock := newClock()
	workers := map[int]Handler{}
	for _, d := range sched.Deliveries {
		clock.Advance(d.Advance)
		h, ok := workers[d.Worker]
		if !ok {
			if h, err = r.newWorker(); err != nil {
				sc.Problems = append(sc.Problems, fmt.Sprintf("delivery %s: %v", d, err))
				sc.Deliveries = append(sc.Deliveries, DeliveryOutcome{Delivery: d.Label(), JobID: jobID(d.Job), Attempt: d.Attempt, Err: err.Error()})
				continue
			}
			workers[d.Worker] = h
		}
		sc.Deliveries = append(sc.Deliveries, r.deliver(ctx, db, clock, h, d))
	}
	if n := len(sc.Deliveries); n > 0 && sc.Deliveries[n-1].Err != "" {
		last := sc.Deliveries[n-1]
		sc.Problems = append(sc.Problems, fmt.Sprintf("the job did not complete: the last delivery %s (job %s, attempt %d) returned an error: %s",
			last.Delivery, last.JobID, last.Attempt, last.Err))
	}
	snap, err := snapshot(ctx, db)
	if err != nil {
		return sc, nil, errors.Join(err, db.Drop(context.WithoutCancel(ctx)))
	}
	sc.StateDiff = assert.DiffState(res.Reference, snap, assert.Options{
		Label:         fault,
		IgnoreTables:  r.cfg.IgnoreTables,
		IgnoreColumns: r.cfg.IgnoreColumns,
		Volatile:      res.Volatile,
		CmpOptions:    r.cfg.CmpOptions,
	})
	for _, d := range sc.StateDiff {
		sc.Problems = append(sc.Problems, fmt.Sprintf("table %q differs from one clean run", d.Table))
	}
	sc.Duration = time.Since(start)
	if len(sc.Problems) == 0 {
		return sc, nil, db.Drop(ctx)
	}
	sc.Verdict = NotIdempotent
	sc.Database = db.ConnString
	return sc, db, nil
}

// executable refuses what this executor cannot run yet: sequential,
// fault-free deliveries only, until the wire proxy steers steps.
func executable(s faults.Schedule) error {
	for _, d := range s.Deliveries {
		if d.Fault != faults.KindNone || d.With != 0 {
			return fmt.Errorf("[twice] fault %s (schedule %s) needs the wire proxy, which is not built yet; use faults.RunTwice and faults.ProducerRetry", s.Fault, s)
		}
	}
	return nil
}

func jobID(n int) string { return fmt.Sprintf("twice-job-%d", n) }

// deliver runs one delivery of h on db with its own connection pool. A
// panic in the handler becomes the delivery's error, with its stack.
func (r *runner) deliver(ctx context.Context, db *freshdb.Database, clock *Clock, h Handler, d faults.Delivery) DeliveryOutcome {
	out := DeliveryOutcome{Delivery: d.Label(), JobID: jobID(d.Job), Attempt: d.Attempt}
	start := time.Now()
	defer func() { out.Duration = time.Since(start) }()

	pool, err := pgxpool.New(ctx, db.ConnString)
	if err != nil {
		out.Err = fmt.Sprintf("[twice] internal: connecting delivery %s: %v", d, err)
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.deliveryTimeout())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("handler panicked: %v\n%s", p, debug.Stack())
			}
		}()
		done <- h(ctx, &Delivery{JobID: out.JobID, Attempt: d.Attempt, DB: pool, DSN: db.ConnString, clock: clock})
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		err = fmt.Errorf("handler did not return within %v (Config.DeliveryTimeout)", r.cfg.deliveryTimeout())
	}
	// A handler that leaks an acquired connection would make Close wait
	// forever; the database is dropped with FORCE later anyway.
	go pool.Close()
	if err != nil {
		out.Err = err.Error()
	}
	return out
}

func snapshot(ctx context.Context, db *freshdb.Database) (*assert.Snapshot, error) {
	conn, err := pgx.Connect(ctx, db.ConnString)
	if err != nil {
		return nil, fmt.Errorf("[twice] internal: connecting to snapshot %s: %w", db.Name, err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	snap, err := assert.TakeSnapshot(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("[twice] internal: snapshot of %s: %w", db.Name, err)
	}
	return snap, nil
}
