// Package twicegue checks gue WorkFuncs (github.com/vgarvardt/gue/v5) with
// twice, as gue runs them: the job is enqueued with gue's own EnqueueTx,
// and each delivery locks it with gue's LockJobByID on the delivery's own
// pool, runs the WorkFunc with the locked job, and finishes it with
// j.Delete or j.Error and j.Done, as gue's Worker.WorkOne does. The lock,
// the WorkFunc's statements in j.Tx() and the final COMMIT are the
// delivery's steps, so the COMMIT that is gue's ack takes the crash and
// the lost reply like any other commit.
//
//	func TestRewardOrder(t *testing.T) {
//		harness.Check(t, twicegue.Job("reward-order",
//			twicegue.Spec[points.RewardArgs]{Type: points.RewardType, Args: points.RewardArgs{OrderID: 9812}},
//			func(d *harness.Delivery) gue.WorkFunc { return points.Reward }),
//			harness.Config{Setup: []harness.Setup{harness.SQL(points.Schema)}})
//	}
//
// The job carries gue's table (gue v5.8.0's own migrations/schema.sql):
// the harness creates it before the config's own setup, in harness.Check,
// harness.Run and harness.Explore alike.
//
// gue has no job states: a job is a row in gue_jobs, worked while a
// transaction holds its row lock, and gone once a worker's transaction
// deleted it. The harness's side of the queue follows that: Fetch hands
// the job out when its row exists, is due on the harness clock and no
// other attempt holds its lock (it waits for a dead attempt's backend to
// let go of it, and for a live attempt to finish); Ack and Nack read what
// the delivery's commit left: no row is completed, a row whose error
// count moved is retried after gue's backoff, on the harness clock. A job
// not due yet (Spec.RunAfter) is not handed out: Fetch answers its run_at
// as queue.Fetched.DueAt, the harness clock moves there, and the WorkFunc
// runs when gue would run it.
//
// What each fault means for gue:
//
//   - crash-before-ack, lost-ack: the delivery's last step was the COMMIT
//     that deleted the row, so nothing is withheld: the redelivery finds
//     no job and is "not delivered". The crash before gue's ack is
//     crash-mid-job at the COMMIT step.
//   - crash-mid-job: the worker dies before step k; its transaction, the
//     lock with it, rolls back, and gue's next poll (5s,
//     PollInterval) hands the job out again. Writes the WorkFunc made
//     outside j.Tx() stay.
//   - ambiguous-commit: the server commits j.Done's COMMIT (the row is
//     deleted), the reply is lost: the delivery's Done fails, and the job
//     is completed all the same.
//   - visibility-timeout, concurrent-delivery: gue never hands out a job
//     whose row another attempt has locked. An attempt that is handed the
//     job and then finds it locked by LockJobByID (SKIP LOCKED) does no
//     work, as gue's worker finds nothing to do.
//   - producer-retry: gue has no unique jobs; the copy is a second job.
//   - redrive: a person sets the job's run_at to now, 72h later, if its
//     row is still there.
//
// The rows of the jobs the harness enqueued are left out of the
// comparison; jobs the WorkFunc enqueues in j.Tx() (child jobs) are
// compared.
//
// README.md in this directory (github.com/runtwice/twice/adapters/gue) has
// the versions this adapter is tested on, its example and what each
// fault found there, and how to use it from a clone.
package twicegue

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"
	exp "github.com/vgarvardt/backoff"
	"github.com/vgarvardt/gue/v5"
	"github.com/vgarvardt/gue/v5/adapter"
	"github.com/vgarvardt/gue/v5/adapter/pgxv5"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
)

// schema is gue v5.8.0's migrations/schema.sql, as gue's README asks
// users to apply it (a test checks the copy against the module).
//
//go:embed schema.sql
var schema string

// DefaultPollInterval is gue's worker poll interval: a job whose lock was
// released by a dead attempt is handed out again this long after it
// started, on the harness clock.
const DefaultPollInterval = 5 * time.Second

// DefaultBackoff is gue's DefaultExponentialBackoff without its jitter, so
// that the harness clock moves the same way in every run.
var DefaultBackoff = gue.NewExponentialBackoff(exp.Config{
	BaseDelay:  time.Second,
	Multiplier: 1.6,
	MaxDelay:   time.Hour,
})

// Spec is the job the producer enqueues.
type Spec[T any] struct {
	// Type is gue's job type, the WorkMap key.
	Type string
	// Queue and Priority are gue's; zero values are gue's defaults.
	Queue    string
	Priority gue.JobPriority
	// Args are encoded with encoding/json into gue's Job.Args; a []byte
	// or json.RawMessage is taken as it is. Every delivery checks that
	// Job.Args decode back into T before the WorkFunc runs.
	Args T
	// RunAfter delays the job's run_at past the harness clock's start,
	// as gue.Job.RunAt set by the producer does: the delivery runs once
	// the harness clock has moved there (queue.Fetched.DueAt).
	RunAfter time.Duration
}

// Option changes how a gue job is checked.
type Option func(*options)

type options struct {
	backoff gue.Backoff
	poll    time.Duration
	ttl     time.Duration
	produce func(context.Context, Producing) error // Producer's
}

// Backoff is the client's backoff (gue.WithClientBackoff): how long after
// an error gue hands the job out again. Without it, DefaultBackoff.
// A backoff with jitter moves the harness clock differently in each run.
func Backoff(b gue.Backoff) Option {
	return func(o *options) { o.backoff = b }
}

// PollInterval is the worker's (gue.WithWorkerPollInterval): how long
// after a delivery started gue hands out again a job it did not finish.
func PollInterval(d time.Duration) Option {
	return func(o *options) { o.poll = d }
}

// JobTTL is the worker's gue.WithWorkerJobTTL: the WorkFunc's context is
// cancelled this long after it started, on the harness clock.
func JobTTL(d time.Duration) Option {
	return func(o *options) { o.ttl = d }
}

// Job is a gue job for harness.Check, harness.Explore and the runner:
// spec is what the producer enqueues, and newWorkFunc builds the WorkFunc
// for each delivery from the delivery's connections (d.DB, d.DSN) and
// clock (d.Now), as the worker's process would at start-up. The job
// carries gue's table, created before the config's own setup.
func Job[T any](name string, spec Spec[T], newWorkFunc func(d *harness.Delivery) gue.WorkFunc, opts ...Option) harness.Job {
	o := options{backoff: DefaultBackoff, poll: DefaultPollInterval}
	for _, opt := range opts {
		opt(&o)
	}
	q := &gueQueue[T]{name: name, spec: spec, opts: o}
	return harness.Job{
		Name:    name,
		Queue:   q,
		Handler: func(ctx context.Context, d *harness.Delivery) error { return q.work(ctx, d, newWorkFunc) },
	}
}

// gueQueue is gue's bookkeeping for one job, as a queue.Queue. Scenarios run
// in parallel on one queue; what it remembers is keyed by values unique
// to a scenario (a handed-out *gue.Job, a job ID).
type gueQueue[T any] struct {
	name string
	spec Spec[T]
	opts options

	attempts  sync.Map // *gue.Job handed out -> *attempt
	errored   sync.Map // job ID -> *erred: a j.Error whose run_at is still on the wall clock
	discarded sync.Map // job ID -> discard: why j.Error deletes the row
}

// discard is why a delivery's j.Error deletes the job's row.
type discard struct {
	why       string
	onPurpose bool // gue.ErrDiscardJob: the job is finished, not failed
}

// erred is a j.Error a delivery ran: the error count it writes, the
// harness clock's time then, and the WorkFunc's error.
type erred struct {
	count int32
	at    time.Time
	err   error
}

// attempt is what one delivery's handler did, for its Ack or Nack.
type attempt struct {
	mu       sync.Mutex
	missed   string // LockJobByID found no row to lock: why
	workErr  error  // the WorkFunc's error or panic
	errorSet bool   // j.Error ran
}

func (a *attempt) set(f func(*attempt)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(a)
}

// Schema is gue's table.
func (q *gueQueue[T]) Schema() queue.Schema {
	return queue.Schema{Name: "twicegue: gue v5.8.0's migrations/schema.sql", SQL: schema}
}

// Rules are gue's poll interval and job TTL, and its job table.
//
// gue has no unique jobs; the producer's own code (Producer) may find its
// earlier enqueue and enqueue nothing, and stamps each enqueue with its
// clock, so the copy after the producer's timeout is tried too
// (Rules.Dedup -1: late-producer-retry in the default matrix).
func (q *gueQueue[T]) Rules() queue.Rules {
	r := queue.Rules{
		Redeliver:   q.opts.poll,
		CancelAfter: q.opts.ttl,
		JobTable:    "gue_jobs",
		JobIDColumn: "job_id",
	}
	if q.opts.produce != nil {
		r.Dedup = -1
	}
	return r
}

// args encodes the spec's arguments as gue's Job.Args.
func (q *gueQueue[T]) args() ([]byte, error) {
	switch a := any(q.spec.Args).(type) {
	case []byte:
		return a, nil
	case json.RawMessage:
		return a, nil
	}
	return json.Marshal(q.spec.Args)
}

// Enqueue inserts the job with gue's EnqueueTx, as the producer does. gue
// has no unique jobs, so a producer's copy is a job of its own.
func (q *gueQueue[T]) Enqueue(ctx context.Context, op queue.Op) (queue.Enqueued, error) {
	if q.opts.produce != nil {
		return q.produce(ctx, op)
	}
	args, err := q.args()
	if err != nil {
		return queue.Enqueued{}, fmt.Errorf("encoding gue job %q args %+v: %w", q.spec.Type, q.spec.Args, err)
	}
	c, err := gue.NewClient(nil)
	if err != nil {
		return queue.Enqueued{}, err
	}
	j := &gue.Job{Type: q.spec.Type, Queue: q.spec.Queue, Priority: q.spec.Priority, Args: args,
		RunAt: op.Now.Add(q.spec.RunAfter).UTC()} // gue's default is the wall clock's now
	// gue's enqueue is one INSERT: it needs no transaction of its own,
	// and BEGIN and COMMIT would cost two round trips per job.
	if err := c.EnqueueTx(ctx, j, pgxv5.NewTx(queue.Autocommit(op.Conn))); err != nil {
		return queue.Enqueued{}, fmt.Errorf("enqueueing gue job %q: %w", q.spec.Type, err)
	}
	return queue.Enqueued{JobID: j.ID.String()}, nil
}

// inTx runs f in a transaction on the harness's connection.
func inTx(ctx context.Context, conn *pgx.Conn, f func(tx pgx.Tx) error) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

const jobColumns = `job_id, queue, priority, run_at, job_type, args, error_count, last_error, created_at`

func scanJob(row pgx.Row) (*gue.Job, error) {
	j := &gue.Job{}
	var id string
	if err := row.Scan(&id, &j.Queue, &j.Priority, &j.RunAt, &j.Type, &j.Args, &j.ErrorCount, &j.LastError, &j.CreatedAt); err != nil {
		return nil, err
	}
	parsed, err := ulid.Parse(id)
	if err != nil {
		return nil, fmt.Errorf("gue job ID %q: %w", id, err)
	}
	j.ID = parsed
	return j, nil
}

// Fetch hands the job out as gue's workers would at op.Now: its row
// exists, is due, and no other attempt holds its lock. The lock is tested
// in a short transaction of the harness's and given up at once: the
// delivery takes it itself with LockJobByID. A row locked by another
// attempt is waited for: a dead attempt's backend lets go of it as it
// rolls back, and a live one's steps run meanwhile (the harness sees the
// wait), so the answer is what gue's next poll would find.
//
// A job that is not due yet (Spec.RunAfter, a backoff after j.Error) is
// not handed out: the answer's DueAt is its run_at, on the harness clock,
// where the harness moves its clock and asks again, so the WorkFunc runs
// when gue would run it.
func (q *gueQueue[T]) Fetch(ctx context.Context, op queue.Op) (queue.Fetched, error) {
	if op.Kind != queue.DeliveryRedrive {
		if out, ok, err := q.fetchAtOnce(ctx, op); ok || err != nil {
			return out, err
		}
	}
	var out queue.Fetched
	err := inTx(ctx, op.Conn, func(tx pgx.Tx) error {
		if op.Kind == queue.DeliveryRedrive {
			// A person redrives a job still in the queue: it runs now.
			if _, err := tx.Exec(ctx, `UPDATE gue_jobs SET run_at = $2 WHERE job_id = $1 AND run_at > $2`, op.JobID, op.Now); err != nil {
				return fmt.Errorf("redriving gue job %s: %w", op.JobID, err)
			}
		}
		j, err := scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM gue_jobs WHERE job_id = $1 FOR UPDATE SKIP LOCKED`, op.JobID))
		held := ""
		if errors.Is(err, pgx.ErrNoRows) {
			var exists bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM gue_jobs WHERE job_id = $1)`, op.JobID).Scan(&exists); err != nil {
				return fmt.Errorf("reading gue job %s: %w", op.JobID, err)
			}
			if exists {
				held = "; another attempt held its lock until then"
				j, err = scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM gue_jobs WHERE job_id = $1 FOR UPDATE`, op.JobID))
			}
		}
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			out = q.gone(op.JobID, held)
			return nil
		case err != nil:
			return fmt.Errorf("locking gue job %s: %w", op.JobID, err)
		}
		if j.RunAt, err = q.onHarnessClock(ctx, tx, op.JobID); err != nil {
			return err
		}
		if j.RunAt.After(op.Now) {
			// gue's poll compares run_at with its worker's time.Now;
			// here run_at is on the harness clock (Enqueue and
			// onHarnessClock write it so) and so is the comparison, and
			// the harness moves its clock to run_at and asks again.
			out = queue.Fetched{DueAt: j.RunAt,
				Reason: fmt.Sprintf("gue job %s is not due until %s (error count %d)%s", op.JobID, j.RunAt.UTC().Format(time.RFC3339Nano), j.ErrorCount, held)}
			return nil
		}
		q.attempts.Store(j, &attempt{})
		out = queue.Fetched{Delivered: true, Job: j}
		return nil
	})
	return out, err
}

// fetchAtOnce is Fetch in one statement, for the common case: the row is
// there, no attempt holds its lock, no j.Error wrote its run_at on the
// wall clock, and it is due. The lock is tested by the statement alone,
// as Fetch's short transaction would test it; ok is false when the job
// needs Fetch's transaction. The errors Fetch reads are looked up after
// the row, so a j.Error whose commit the row shows was noted before it.
func (q *gueQueue[T]) fetchAtOnce(ctx context.Context, op queue.Op) (out queue.Fetched, ok bool, err error) {
	j, err := scanJob(op.Conn.QueryRow(ctx, `SELECT `+jobColumns+` FROM gue_jobs WHERE job_id = $1 FOR UPDATE SKIP LOCKED`, op.JobID))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return queue.Fetched{}, false, nil
	case err != nil:
		return queue.Fetched{}, false, fmt.Errorf("locking gue job %s: %w", op.JobID, err)
	}
	if _, erred := q.errored.Load(op.JobID); erred || j.RunAt.After(op.Now) {
		return queue.Fetched{}, false, nil
	}
	q.attempts.Store(j, &attempt{})
	return queue.Fetched{Delivered: true, Job: j}, true, nil
}

// onHarnessClock moves the run_at that j.Error wrote on the wall clock
// (gue reads time.Now) to the harness clock, once its commit is seen, and
// returns the job's run_at. The caller holds the row's lock or may wait
// for it.
func (q *gueQueue[T]) onHarnessClock(ctx context.Context, tx pgx.Tx, id string) (time.Time, error) {
	var errorCount int32
	var runAt, updatedAt time.Time
	if err := tx.QueryRow(ctx, `SELECT error_count, run_at, updated_at FROM gue_jobs WHERE job_id = $1`, id).Scan(&errorCount, &runAt, &updatedAt); err != nil {
		return time.Time{}, fmt.Errorf("reading gue job %s: %w", id, err)
	}
	v, ok := q.errored.Load(id)
	if !ok {
		return runAt, nil
	}
	e := v.(*erred)
	if e.count != errorCount || !q.errored.CompareAndDelete(id, v) {
		return runAt, nil // that j.Error did not commit, or another read moved it
	}
	runAt = e.at.Add(errorDelay(e.err, runAt, updatedAt, e.at))
	if _, err := tx.Exec(ctx, `UPDATE gue_jobs SET run_at = $2, updated_at = $3 WHERE job_id = $1`, id, runAt, e.at); err != nil {
		return time.Time{}, fmt.Errorf("moving gue job %s's run_at to the harness clock: %w", id, err)
	}
	return runAt, nil
}

// gone says why a job whose row is no longer there is not handed out:
// an attempt completed it, or j.Error discarded it.
func (q *gueQueue[T]) gone(id, held string) queue.Fetched {
	if v, ok := q.discarded.Load(id); ok {
		d := v.(discard)
		return queue.Fetched{Done: d.onPurpose, Reason: fmt.Sprintf("gue job %s was discarded: %s%s", id, d.why, held)}
	}
	return queue.Fetched{Done: true, Reason: fmt.Sprintf("gue job %s is no longer in gue_jobs: an attempt completed it%s", id, held)}
}

// work runs one delivery as gue's Worker.WorkOne runs a job it found:
// LockJobByID on the delivery's pool, the WorkFunc with the locked job,
// then j.Delete, or j.Error after an error or a panic, and j.Done.
func (q *gueQueue[T]) work(ctx context.Context, d *harness.Delivery, newWorkFunc func(*harness.Delivery) gue.WorkFunc) error {
	fetched, ok := d.Queued.(*gue.Job)
	if !ok || fetched == nil {
		return fmt.Errorf("twicegue: job %q, delivery %d of job %s: the delivery carries no gue job (%T); run it through twicegue.Job", q.name, d.Attempt, d.JobID, d.Queued)
	}
	at := q.attemptOf(fetched)
	where := fmt.Sprintf("job %q, gue job %s (type %q, delivery %d, %s)", q.name, d.JobID, fetched.Type, d.Attempt, d.Kind)
	if err := q.decode(fetched.Args); err != nil {
		return fmt.Errorf("twicegue: %s: %w", where, err)
	}
	wf := newWorkFunc(d)
	if wf == nil {
		return fmt.Errorf("twicegue: %s: newWorkFunc returned a nil WorkFunc", where)
	}
	c, err := gue.NewClient(pgxv5.NewConnPool(d.DB), gue.WithClientBackoff(q.opts.backoff))
	if err != nil {
		return fmt.Errorf("twicegue: %s: a gue client on the delivery's pool: %w", where, err)
	}
	j, err := c.LockJobByID(ctx, fetched.ID)
	if errors.Is(err, adapter.ErrNoRows) {
		// Another attempt locked or deleted it after Fetch: gue's worker
		// would have found nothing to do.
		at.set(func(a *attempt) { a.missed = "LockJobByID found it locked by another attempt or deleted" })
		return nil
	}
	if err != nil {
		return fmt.Errorf("twicegue: %s: %w", where, err)
	}
	// j.Error writes run_at on the wall clock; remember what it writes so
	// the queue can move it to the harness clock once it committed.
	onError := func(err error) {
		at.set(func(a *attempt) { a.workErr, a.errorSet = err, true })
		q.errored.Store(d.JobID, &erred{count: j.ErrorCount + 1, at: d.Now(), err: err})
		// j.Error deletes the row for these; a later Fetch that finds it
		// gone, even with no Nack between (the worker died), says why.
		switch {
		case isReschedule(err, "discarding job"):
			q.discarded.Store(d.JobID, discard{why: "the WorkFunc returned gue.ErrDiscardJob", onPurpose: true})
		case !isReschedule(err, "rescheduling job") && q.opts.backoff(int(j.ErrorCount+1)) < 0:
			// The error's first line: an adapter module may not lean on
			// the root's internal packages, which change with it.
			msg, _, _ := strings.Cut(err.Error(), "\n")
			q.discarded.Store(d.JobID, discard{why: "the backoff gave up after an error: " + msg})
		}
	}
	return workOne(ctx, j, wf, onError, where)
}

func (q *gueQueue[T]) attemptOf(j *gue.Job) *attempt {
	if a, ok := q.attempts.Load(j); ok {
		return a.(*attempt)
	}
	return &attempt{}
}

// decode checks that args decode into T, as the WorkFunc will decode them.
func (q *gueQueue[T]) decode(args []byte) error {
	switch any(q.spec.Args).(type) {
	case []byte, json.RawMessage:
		return nil
	}
	var v T
	if err := json.Unmarshal(args, &v); err != nil {
		return fmt.Errorf("its args %s do not decode into %T: %w", args, v, err)
	}
	return nil
}

// workOne is gue's Worker.WorkOne after the lock, hooks and metrics left
// out. It returns what the delivery's worker saw: the WorkFunc's error as
// it is (Nack reads gue's reschedule and discard errors from it), a
// panic, or Done's failure to commit.
func workOne(ctx context.Context, j *gue.Job, wf gue.WorkFunc, onError func(error), where string) (err error) {
	defer func() {
		if derr := j.Done(ctx); derr != nil && err == nil {
			err = fmt.Errorf("twicegue: %s: j.Done could not commit: %w", where, derr)
		}
	}()
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		perr := fmt.Errorf("%w: %v\n%s", gue.ErrJobPanicked, p, debug.Stack())
		onError(perr)
		err = fmt.Errorf("twicegue: %s: the WorkFunc panicked: %v (%w)", where, p, gue.ErrJobPanicked)
		if jerr := j.Error(ctx, perr); jerr != nil {
			err = fmt.Errorf("%w; j.Error: %w", err, jerr)
		}
	}()
	if werr := wf(ctx, j); werr != nil {
		onError(werr)
		if jerr := j.Error(ctx, werr); jerr != nil {
			return fmt.Errorf("%w (twicegue: %s: j.Error: %w)", werr, where, jerr)
		}
		return werr
	}
	if derr := j.Delete(ctx); derr != nil {
		return fmt.Errorf("twicegue: %s: j.Delete: %w", where, derr)
	}
	return nil
}

// Ack reads what the delivery's commit left after the WorkFunc returned
// nil.
func (q *gueQueue[T]) Ack(ctx context.Context, op queue.Op) (queue.Settled, error) {
	return q.settle(ctx, op)
}

// Nack reads what the delivery's commit left after it failed: gue's
// j.Error moved the row's run_at by its backoff, or a reschedule error's,
// or deleted it (a discard); a commit whose reply was lost may have
// deleted it as completed.
func (q *gueQueue[T]) Nack(ctx context.Context, op queue.Op, _ error) (queue.Settled, error) {
	return q.settle(ctx, op)
}

// settle reads the job's row for Ack and Nack alike: gue's ack is the
// delivery's own commit, and what the handler returned is already in it.
func (q *gueQueue[T]) settle(ctx context.Context, op queue.Op) (queue.Settled, error) {
	fetched, ok := op.Queued.(*gue.Job)
	if !ok || fetched == nil {
		return queue.Settled{}, fmt.Errorf("the delivery of job %s carries no gue job (%T)", op.JobID, op.Queued)
	}
	at := q.attemptOf(fetched)
	q.attempts.Delete(fetched)
	at.mu.Lock()
	missed, workErr, errorSet := at.missed, at.workErr, at.errorSet
	at.mu.Unlock()

	if out, ok, err := q.settleAtOnce(ctx, op, missed, errorSet); ok || err != nil {
		return out, err
	}
	var out queue.Settled
	err := inTx(ctx, op.Conn, func(tx pgx.Tx) error {
		var errorCount int32
		err := tx.QueryRow(ctx, `SELECT error_count FROM gue_jobs WHERE job_id = $1`, op.JobID).Scan(&errorCount)
		if errors.Is(err, pgx.ErrNoRows) {
			out = q.deleted(op.JobID, missed, workErr, errorSet)
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading gue job %s: %w", op.JobID, err)
		}
		runAt, err := q.onHarnessClock(ctx, tx, op.JobID)
		if err != nil {
			return err
		}
		after := max(runAt.Sub(op.Now), 0)
		switch {
		case missed != "":
			// gue's worker found nothing to lock: it polls again.
			if after == 0 {
				after = q.opts.poll
			}
			out = queue.Settled{Outcome: queue.Retry, After: after, Detail: fmt.Sprintf("not delivered: %s; gue hands it out in %v", missed, after)}
		case !errorSet || errorCount <= fetched.ErrorCount:
			// The attempt's transaction rolled back: the row is as it
			// was, and gue's next poll finds it.
			if after == 0 {
				after = q.opts.poll
			}
			out = queue.Settled{Outcome: queue.Retry, After: after,
				Detail: fmt.Sprintf("gue job %s is still queued (the attempt's transaction rolled back); gue hands it out in %v", op.JobID, after)}
		case isReschedule(workErr, "rescheduling job"):
			out = queue.Settled{Outcome: queue.Snoozed, After: after, Detail: fmt.Sprintf("for %v (error count %d)", after, errorCount)}
		default:
			out = queue.Settled{Outcome: queue.Retry, After: after, Detail: fmt.Sprintf("in %v (error count %d)", after, errorCount)}
		}
		return nil
	})
	return out, err
}

// settleAtOnce is settle in one statement, for the common case: the
// delivery committed and deleted the row (gue's ack), with no j.Error and
// no missed lock. ok is false when the job needs settle's transaction.
func (q *gueQueue[T]) settleAtOnce(ctx context.Context, op queue.Op, missed string, errorSet bool) (queue.Settled, bool, error) {
	if missed != "" || errorSet {
		return queue.Settled{}, false, nil
	}
	var exists bool
	if err := op.Conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM gue_jobs WHERE job_id = $1)`, op.JobID).Scan(&exists); err != nil {
		return queue.Settled{}, false, fmt.Errorf("reading gue job %s: %w", op.JobID, err)
	}
	if exists {
		return queue.Settled{}, false, nil
	}
	return q.deleted(op.JobID, missed, nil, errorSet), true, nil
}

// deleted reads a job whose row is gone: a delivery's j.Error discarded
// it, or a commit (this delivery's, or another's) completed it.
func (q *gueQueue[T]) deleted(id, missed string, workErr error, errorSet bool) queue.Settled {
	if v, ok := q.discarded.Load(id); ok && (errorSet || missed != "") {
		d := v.(discard)
		if d.onPurpose {
			return queue.Settled{Outcome: queue.Cancelled, Detail: d.why}
		}
		return queue.Settled{Outcome: queue.Discarded, Detail: d.why}
	}
	if missed != "" {
		return queue.Settled{Outcome: queue.Completed, Detail: "not delivered: " + missed + "; another attempt completed it"}
	}
	return queue.Settled{Outcome: queue.Completed}
}

// errorDelay is how long after now gue runs the job again: its backoff or
// ErrRescheduleJobIn's delay, which j.Error added to the wall clock's now
// it also wrote to updated_at (to the millisecond: the two come from two
// clock readings for a reschedule), or ErrRescheduleJobAt's time, which
// the WorkFunc took from the harness clock.
func errorDelay(workErr error, runAt, updatedAt, now time.Time) time.Duration {
	if isReschedule(workErr, "rescheduling job at") {
		return max(runAt.Sub(now), 0)
	}
	return max(runAt.Sub(updatedAt).Round(time.Millisecond), 0)
}

// isReschedule reports whether err is one of gue's reschedule errors
// (ErrRescheduleJobIn, ErrRescheduleJobAt, ErrDiscardJob) whose message
// starts with prefix. gue tells them apart by an unexported method and
// does not unwrap them (j.Error asserts err's type), so neither does
// this; the message is the only exported difference.
func isReschedule(err error, prefix string) bool {
	_, ok := err.(gue.ErrJobReschedule)
	return ok && strings.HasPrefix(err.Error(), prefix)
}
