// Package twiceriver checks River workers (github.com/riverqueue/river)
// with twice, as River runs them: the job is inserted with River's own
// InsertTx, handed out and completed through River's job states on the
// harness's connection, and Worker.Work runs inside a work context with a
// real river.Client, so ClientFromContext, JobCompleteTx and InsertTx
// with UniqueOpts work as in production. Only the worker's own statements
// are steps; River's bookkeeping is not.
//
//	func TestRewardWorker(t *testing.T) {
//		harness.Check(t, twiceriver.Job("reward-order", points.RewardArgs{OrderID: 9812},
//			func(d *harness.Delivery) river.Worker[points.RewardArgs] {
//				return &points.RewardWorker{Pool: d.DB}
//			},
//			twiceriver.InsertOpts(&river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}})),
//			harness.Config{Setup: []harness.Setup{harness.SQL(points.Schema)}})
//	}
//
// The job carries River's schema: the harness migrates River up (one
// transaction per version, as rivermigrate does) before the config's own
// setup, in harness.Check, harness.Run and harness.Explore alike.
//
// What each fault means for River:
//
//   - crash-before-ack: Work returned, River's completer never ran; the
//     job stays running until the rescuer hands it out again
//     (RescueStuckJobsAfter, 1h). A worker that completes the job with
//     JobCompleteTx in its own transaction is not handed out again.
//   - lost-ack: the same, with the worker alive.
//   - crash-mid-job, ambiguous-commit: the worker dies, or its commit's
//     reply is lost and Work returns the error; the job is retried
//     (retryable) or rescued, as River would.
//   - visibility-timeout: the rescuer hands out a job whose attempt still
//     runs. River first cancels that attempt's context at its timeout
//     (JobTimeout, 1 min by default): a worker that honours its context
//     stops there; only one with no timeout, or one that ignores it,
//     overlaps a second attempt.
//   - concurrent-delivery: River never hands out a running job before its
//     rescue, so the second delivery is "not delivered".
//   - producer-retry: the job is inserted twice; with UniqueOpts the copy
//     is refused as a duplicate and never delivered.
//   - redrive: JobRetry days later, after the rescuer, of a job River
//     does not show completed.
//
// The job's own river_job row and River's tables are left out of the
// comparison; rows the worker inserts into river_job (child jobs) are
// compared.
package twiceriver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
)

// River's defaults, which the check models unless an Option says
// otherwise.
const (
	// DefaultRescueAfter is River's RescueStuckJobsAfter: a running job
	// is handed out again this long after its attempt started.
	DefaultRescueAfter = time.Hour
	// DefaultTimeout is River's JobTimeout: a worker's context is
	// cancelled this long after its attempt started.
	DefaultTimeout = time.Minute
)

// Option changes how a River job is checked.
type Option func(*options)

type options struct {
	insert      *river.InsertOpts
	rescueAfter time.Duration
	timeout     time.Duration
	workers     *river.Workers
}

// InsertOpts are the options the producer inserts the job with: its
// queue, priority, max attempts, and UniqueOpts, under which a producer's
// copy is refused as a duplicate.
func InsertOpts(opts *river.InsertOpts) Option {
	return func(o *options) { o.insert = opts }
}

// RescueAfter is the client's RescueStuckJobsAfter: how long after an
// attempt started River hands a job that is still running out again.
func RescueAfter(d time.Duration) Option {
	return func(o *options) { o.rescueAfter = d }
}

// Timeout is how long River lets an attempt run before it cancels the
// worker's context: the client's JobTimeout, or the worker's own Timeout
// when it has one; -1 for none. The check refuses a worker whose Timeout
// says otherwise, since the faults depend on it.
func Timeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// Workers is the workers bundle of the production client that works the
// job. The delivery's client then checks the kinds of the jobs the worker
// inserts as River does: a child job (InsertTx) of a kind no worker in the
// bundle serves fails with river.UnknownJobKindError, as in production,
// instead of passing the check. Without it the delivery's client is an
// insert-only client, which checks no kinds.
func Workers(w *river.Workers) Option {
	return func(o *options) { o.workers = w }
}

// schema is River's: its migrations, up, one transaction per version, as
// rivermigrate does (one transaction for all of them fails: version 4
// adds an enum value that version 6 uses).
var schema = queue.Schema{Name: "twiceriver: River's migrations, up", Apply: migrate}

func migrate(ctx context.Context, conn *pgx.Conn) error {
	pool, err := pgxpool.New(ctx, conn.Config().ConnString())
	if err != nil {
		return fmt.Errorf("twiceriver: a pool for River's migrator: %w", err)
	}
	defer pool.Close()
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: quiet})
	if err != nil {
		return fmt.Errorf("twiceriver: River's migrator: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("twiceriver: migrating River's schema up: %w", err)
	}
	return nil
}

var quiet = slog.New(slog.DiscardHandler)

// Job is a River job for harness.Check, harness.Explore and the runner:
// args are the job's arguments, inserted by the producer as River would,
// and newWorker builds the worker for each delivery from the delivery's
// connections (d.DB, d.DSN, d.SQL) and clock (d.Now), as the worker's
// process would at start-up. The worker's Work runs with a river.Client
// on the delivery's pool in its context; its timeout is checked against
// Timeout. The job carries River's schema, migrated before the config's
// own setup.
func Job[T river.JobArgs](name string, args T, newWorker func(d *harness.Delivery) river.Worker[T], opts ...Option) harness.Job {
	o := options{rescueAfter: DefaultRescueAfter, timeout: DefaultTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	q := &riverQueue[T]{name: name, args: args, opts: o}
	return harness.Job{
		Name:    name,
		Queue:   q,
		Handler: func(ctx context.Context, d *harness.Delivery) error { return q.work(ctx, d, newWorker) },
	}
}

// riverQueue is River's bookkeeping for one job, as a queue.Queue.
type riverQueue[T river.JobArgs] struct {
	name string
	args T
	opts options
}

// clock is River's time: the harness clock.
type clock func() time.Time

// Now is the harness clock's time.
func (c clock) Now() time.Time { return c() }

// NowOrNil is the harness clock's time: River's time is always stubbed.
func (c clock) NowOrNil() *time.Time {
	t := c().UTC()
	return &t
}

// client is a River client that never works jobs (it has no queues);
// with a nil pool it only runs in the transactions it is given. With
// workers, its inserts check the job's kind against them.
func client(pool riverdriver.Driver[pgx.Tx], now func() time.Time, workers *river.Workers) (*river.Client[pgx.Tx], error) {
	return river.NewClient(pool, &river.Config{Logger: quiet, Test: river.TestConfig{Time: clock(now)}, Workers: workers})
}

// work runs one delivery: it rebuilds River's Job from the row the
// queue handed out and calls the worker's Work in a work context.
func (q *riverQueue[T]) work(ctx context.Context, d *harness.Delivery, newWorker func(*harness.Delivery) river.Worker[T]) error {
	row, ok := d.Queued.(*rivertype.JobRow)
	if !ok || row == nil {
		return fmt.Errorf("twiceriver: job %q delivery of job %s: the delivery carries no River job row (%T); run it through twiceriver.Job", q.name, d.JobID, d.Queued)
	}
	var args T
	if err := json.Unmarshal(row.EncodedArgs, &args); err != nil {
		return fmt.Errorf("twiceriver: job %q, River job %d (attempt %d): its args %s do not decode into %T: %w", q.name, row.ID, row.Attempt, row.EncodedArgs, args, err)
	}
	w := newWorker(d)
	if w == nil {
		return fmt.Errorf("twiceriver: job %q, River job %d (attempt %d): newWorker returned a nil worker", q.name, row.ID, row.Attempt)
	}
	job := &river.Job[T]{JobRow: row, Args: args}
	if got := w.Timeout(job); got != 0 && got != q.opts.timeout {
		return fmt.Errorf("twiceriver: job %q: worker %T's Timeout is %v, but the check models River cancelling an attempt after %v; pass twiceriver.Timeout(%v) so the faults are the ones River can make", q.name, w, got, q.opts.timeout, got)
	}
	c, err := client(riverpgxv5.New(d.DB), d.Now, q.opts.workers)
	if err != nil {
		return fmt.Errorf("twiceriver: job %q: a River client for the delivery: %w", q.name, err)
	}
	which := fmt.Sprintf("twiceriver: job %q, River job %d (kind %q, attempt %d, %s)", q.name, row.ID, row.Kind, row.Attempt, d.Kind)
	err = work(rivertest.WorkContext(ctx, c), w, job, which)
	if errors.Is(err, rivertype.ErrNotFound) {
		// The job is running in the scenario's database, where Fetch
		// just locked it: a JobCompleteTx that finds no such job ran in
		// a transaction on another database.
		return fmt.Errorf("%s: Work returned %w; but job %d is running in the scenario's database, so the JobCompleteTx that found no job ran in a transaction on another database: the worker writes through a pool of its own (a global pool, a DSN from the environment), not the delivery's; build the worker from d.DB, d.DSN or d.SQL() in newWorker",
			which, err, row.ID)
	}
	return err
}

// work calls w.Work; a panic is an error naming the job and the delivery,
// as River's executor records a panic as the attempt's error.
func work[T river.JobArgs](ctx context.Context, w river.Worker[T], job *river.Job[T], which string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: Work panicked: %v\n%s", which, p, debug.Stack())
		}
	}()
	return w.Work(ctx, job)
}

// Schema is River's, migrated up.
func (q *riverQueue[T]) Schema() queue.Schema { return schema }

// Rules are River's rescuer and job timeout, and its tables.
func (q *riverQueue[T]) Rules() queue.Rules {
	cancel := q.opts.timeout
	if cancel < 0 {
		cancel = 0
	}
	return queue.Rules{
		Redeliver:   q.opts.rescueAfter,
		CancelAfter: cancel,
		Tables:      []string{"river_migration", "river_leader", "river_queue", "river_client", "river_client_queue"},
		JobTable:    "river_job",
		JobIDColumn: "id",
		// Fetch moves the job to running, and hands out a running job
		// only once the rescuer would (Redeliver).
		OneDeliveryAtATime: true,
	}
}

// inTx runs f in a transaction on the harness's connection.
func inTx[R any](ctx context.Context, conn *pgx.Conn, f func(tx pgx.Tx) (R, error)) (R, error) {
	var zero R
	tx, err := conn.Begin(ctx)
	if err != nil {
		return zero, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	out, err := f(tx)
	if err != nil {
		return zero, err
	}
	return out, tx.Commit(ctx)
}

// Enqueue inserts the job with River's InsertTx, as the producer does.
func (q *riverQueue[T]) Enqueue(ctx context.Context, op queue.Op) (queue.Enqueued, error) {
	c, err := client(riverpgxv5.New(nil), func() time.Time { return op.Now }, nil)
	if err != nil {
		return queue.Enqueued{}, err
	}
	return inTx(ctx, op.Conn, func(tx pgx.Tx) (queue.Enqueued, error) {
		res, err := c.InsertTx(ctx, tx, q.args, q.opts.insert)
		if err != nil {
			return queue.Enqueued{}, fmt.Errorf("inserting %s args %+v: %w", q.args.Kind(), q.args, err)
		}
		if res.UniqueSkippedAsDuplicate {
			return queue.Enqueued{JobID: strconv.FormatInt(res.Job.ID, 10), Duplicate: true,
				Reason: fmt.Sprintf("River's UniqueOpts matched job %d (%s)", res.Job.ID, res.Job.State)}, nil
		}
		return queue.Enqueued{JobID: strconv.FormatInt(res.Job.ID, 10)}, nil
	})
}

// Fetch hands the job out as River's producer and maintenance services
// would at op.Now: a redrive is River's JobRetry; a running job whose
// attempt started RescueAfter ago is rescued first; then the job is
// locked for a new attempt if it is available, retryable or scheduled and
// due.
func (q *riverQueue[T]) Fetch(ctx context.Context, op queue.Op) (queue.Fetched, error) {
	id, err := strconv.ParseInt(op.JobID, 10, 64)
	if err != nil {
		return queue.Fetched{}, fmt.Errorf("job ID %q is not River's: %w", op.JobID, err)
	}
	c, err := client(riverpgxv5.New(nil), func() time.Time { return op.Now }, nil)
	if err != nil {
		return queue.Fetched{}, err
	}
	return inTx(ctx, op.Conn, func(tx pgx.Tx) (queue.Fetched, error) {
		rescue, err := json.Marshal(rivertype.AttemptError{At: op.Now, Error: "Stuck job rescued by Rescuer"})
		if err != nil {
			return queue.Fetched{}, err
		}
		if _, err := tx.Exec(ctx, `
			UPDATE river_job SET
				state = CASE WHEN attempt >= max_attempts THEN 'discarded'::river_job_state ELSE 'retryable'::river_job_state END,
				finalized_at = CASE WHEN attempt >= max_attempts THEN $2::timestamptz END,
				errors = array_append(errors, $3::jsonb),
				scheduled_at = $2::timestamptz
			WHERE id = $1 AND state = 'running' AND attempted_at <= $2::timestamptz - $4::interval`,
			id, op.Now, rescue, q.opts.rescueAfter); err != nil {
			return queue.Fetched{}, fmt.Errorf("rescuing job %d: %w", id, err)
		}
		if op.Kind == queue.DeliveryRedrive {
			// A person redrives a job that failed or is stuck; one River
			// shows completed has nothing to redrive.
			row, err := c.JobGetTx(ctx, tx, id)
			if err != nil {
				return queue.Fetched{}, fmt.Errorf("reading job %d: %w", id, err)
			}
			if row.State == rivertype.JobStateCompleted {
				return queue.Fetched{Done: true, Reason: fmt.Sprintf("River job %d is completed, so nobody redrives it", id)}, nil
			}
			if _, err := c.JobRetryTx(ctx, tx, id); err != nil {
				return queue.Fetched{}, fmt.Errorf("JobRetry of job %d: %w", id, err)
			}
		}
		tag, err := tx.Exec(ctx, `
			UPDATE river_job SET
				state = 'running',
				attempt = attempt + 1,
				attempted_at = $2::timestamptz,
				attempted_by = array_append(coalesce(attempted_by, '{}'), 'twice')
			WHERE id = $1 AND state IN ('available', 'retryable', 'scheduled') AND scheduled_at <= $2::timestamptz`,
			id, op.Now)
		if err != nil {
			return queue.Fetched{}, fmt.Errorf("fetching job %d: %w", id, err)
		}
		row, err := c.JobGetTx(ctx, tx, id)
		if err != nil {
			return queue.Fetched{}, fmt.Errorf("reading job %d: %w", id, err)
		}
		if tag.RowsAffected() == 1 {
			return queue.Fetched{Delivered: true, Attempt: row.Attempt, Job: row}, nil
		}
		return notFetched(row, op.Now, q.opts.rescueAfter), nil
	})
}

// notFetched says why River would not hand row out at now.
func notFetched(row *rivertype.JobRow, now time.Time, rescue time.Duration) queue.Fetched {
	switch row.State {
	case rivertype.JobStateCompleted, rivertype.JobStateCancelled:
		return queue.Fetched{Done: true, Reason: fmt.Sprintf("River job %d is %s", row.ID, row.State)}
	case rivertype.JobStateRunning:
		return queue.Fetched{Reason: fmt.Sprintf("River job %d is running (attempt %d); its rescuer hands it out again only %v after the attempt started", row.ID, row.Attempt, rescue)}
	case rivertype.JobStateDiscarded:
		return queue.Fetched{Reason: fmt.Sprintf("River job %d is discarded after %d attempts", row.ID, row.Attempt)}
	}
	return queue.Fetched{Reason: fmt.Sprintf("River job %d is %s until %s", row.ID, row.State, row.ScheduledAt.Sub(now))}
}

// Ack is River's completer after Work returned nil.
func (q *riverQueue[T]) Ack(ctx context.Context, op queue.Op) (queue.Settled, error) {
	row, err := rowOf(op)
	if err != nil {
		return queue.Settled{}, err
	}
	return q.setState(ctx, op, riverdriver.JobSetStateCompleted(row.ID, op.Now, nil), false)
}

// Nack is River's executor after Work returned err: a snooze, a
// cancellation, a discard after the last attempt, or a retry after the
// default retry policy's delay (attempt⁴ seconds; River adds up to 10%
// jitter, which the check leaves out so runs compare).
func (q *riverQueue[T]) Nack(ctx context.Context, op queue.Op, werr error) (queue.Settled, error) {
	row, err := rowOf(op)
	if err != nil {
		return queue.Settled{}, err
	}
	var snooze *rivertype.JobSnoozeError
	if errors.As(werr, &snooze) {
		meta, err := snoozes(row.Metadata)
		if err != nil {
			return queue.Settled{}, err
		}
		return q.setState(ctx, op, riverdriver.JobSetStateSnoozed(row.ID, op.Now.Add(snooze.Duration), row.Attempt-1, meta), true)
	}
	errData, err := json.Marshal(rivertype.AttemptError{At: op.Now, Attempt: row.Attempt, Error: werr.Error()})
	if err != nil {
		return queue.Settled{}, err
	}
	var cancel *rivertype.JobCancelError
	switch {
	case errors.As(werr, &cancel):
		return q.setState(ctx, op, riverdriver.JobSetStateCancelled(row.ID, op.Now, errData, nil), false)
	case row.Attempt >= row.MaxAttempts:
		return q.setState(ctx, op, riverdriver.JobSetStateDiscarded(row.ID, op.Now, errData, nil), false)
	}
	delay := time.Duration(math.Pow(float64(row.Attempt), 4)) * time.Second
	return q.setState(ctx, op, riverdriver.JobSetStateErrorRetryable(row.ID, op.Now.Add(delay), errData, nil), false)
}

func rowOf(op queue.Op) (*rivertype.JobRow, error) {
	row, ok := op.Queued.(*rivertype.JobRow)
	if !ok || row == nil {
		return nil, fmt.Errorf("the delivery of job %s carries no River job row (%T)", op.JobID, op.Queued)
	}
	return row, nil
}

// snoozes is River's metadata update for one more snooze.
func snoozes(metadata []byte) ([]byte, error) {
	var m struct {
		Snoozes int64 `json:"snoozes"`
	}
	if len(metadata) > 0 {
		if err := json.Unmarshal(metadata, &m); err != nil {
			return nil, fmt.Errorf("reading the job's metadata %s: %w", metadata, err)
		}
	}
	return json.Marshal(map[string]int64{"snoozes": m.Snoozes + 1})
}

// setState runs River's own JobSetStateIfRunningMany, as its completer
// does: a job no longer running (completed in the worker's transaction,
// taken by another attempt) is left as it is. It reports the state the
// job is in afterwards; snooze says p is a snooze.
func (q *riverQueue[T]) setState(ctx context.Context, op queue.Op, p *riverdriver.JobSetStateIfRunningParams, snooze bool) (queue.Settled, error) {
	return inTx(ctx, op.Conn, func(tx pgx.Tx) (queue.Settled, error) {
		rows, err := riverpgxv5.New(nil).UnwrapExecutor(tx).JobSetStateIfRunningMany(ctx, &riverdriver.JobSetStateIfRunningManyParams{
			ID:              []int64{p.ID},
			Attempt:         []*int{p.Attempt},
			ErrData:         [][]byte{p.ErrData},
			FinalizedAt:     []*time.Time{p.FinalizedAt},
			MetadataDoMerge: []bool{len(p.MetadataUpdates) > 0},
			MetadataUpdates: [][]byte{p.MetadataUpdates},
			ScheduledAt:     []*time.Time{p.ScheduledAt},
			State:           []rivertype.JobState{p.State},
		})
		if err != nil {
			return queue.Settled{}, fmt.Errorf("setting job %d %s: %w", p.ID, p.State, err)
		}
		if len(rows) != 1 {
			return queue.Settled{}, fmt.Errorf("setting job %d %s: River returned %d rows", p.ID, p.State, len(rows))
		}
		row := rows[0]
		if snooze && row.State == p.State {
			after := max(row.ScheduledAt.Sub(op.Now), 0)
			return queue.Settled{Outcome: queue.Snoozed, After: after, Detail: fmt.Sprintf("for %v", after)}, nil
		}
		return settled(row, op.Now, q.opts.rescueAfter), nil
	})
}

// settled reads the job's state after the completer ran.
func settled(row *rivertype.JobRow, now time.Time, rescue time.Duration) queue.Settled {
	after := max(row.ScheduledAt.Sub(now), 0)
	switch row.State {
	case rivertype.JobStateCompleted:
		return queue.Settled{Outcome: queue.Completed}
	case rivertype.JobStateCancelled:
		return queue.Settled{Outcome: queue.Cancelled}
	case rivertype.JobStateDiscarded:
		return queue.Settled{Outcome: queue.Discarded, Detail: fmt.Sprintf("after %d of %d attempts", row.Attempt, row.MaxAttempts)}
	case rivertype.JobStateRunning:
		return queue.Settled{Outcome: queue.Retry, After: rescue, Detail: fmt.Sprintf("attempt %d holds the job", row.Attempt)}
	}
	return queue.Settled{Outcome: queue.Retry, After: after, Detail: fmt.Sprintf("in %v (attempt %d of %d)", after, row.Attempt, row.MaxAttempts)}
}
