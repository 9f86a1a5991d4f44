// Package twiceasynq checks asynq handlers (github.com/hibiken/asynq
// v0.26.0) with twice, as asynq runs them. asynq keeps its queue in Redis;
// twice needs none: the adapter models asynq's bookkeeping (its client's
// enqueue, its processor's dequeue, lease, retry and archive, its
// recoverer and forwarder) in two tables of the scenario's own database,
// written on the harness's connection, so every scenario starts with a
// fresh queue and none of it is the handler's steps. The handler gets a
// real *asynq.Task and a context built by asynq's own constructor, so
// asynq.GetTaskID, GetRetryCount, GetMaxRetry and GetQueueName answer from
// the delivery.
//
//	func TestRewardHandler(t *testing.T) {
//		harness.Check(t, twiceasynq.Job("reward-order", rewards.NewRewardTask(9812),
//			func(d *harness.Delivery) asynq.Handler { return &rewards.RewardHandler{Pool: d.DB} }),
//			harness.Config{Setup: []harness.Setup{harness.SQL(rewards.Schema)}})
//	}
//
// The job carries the adapter's tables: the harness creates them before
// the config's own setup, in harness.Check, harness.Run and
// harness.Explore alike.
//
// What each fault means for asynq:
//
//   - crash-before-ack, lost-ack: the handler returned, asynq's processor
//     never recorded it (the worker died, or Redis did not answer). The
//     task stays active until its lease (30s) expires; asynq's recoverer
//     moves it to retry 30s after that, counting the lease expiry as a
//     failure (retry count + 1), and it runs again after the retry delay.
//   - crash-mid-job, ambiguous-commit: the same for a crash; a handler
//     that returns the lost commit's error is retried after the delay.
//   - visibility-timeout: a second worker gets the task while the first
//     still runs: only when the first worker lost its heartbeats, so its
//     lease expired. asynq's processor then cancels the first handler's
//     context (at the lease's 30s, or at the task's Timeout if sooner)
//     and records nothing; a handler deaf to its context overlaps.
//   - concurrent-delivery: asynq never hands out an active task whose
//     lease holds: not delivered.
//   - producer-retry: the task is enqueued twice. Without TaskID the copy
//     gets a new ID and runs; with TaskID it is refused
//     (ErrTaskIDConflict), with Unique while the first holds the lock
//     (ErrDuplicateTask): not delivered.
//   - redrive: the Inspector's RunTask of an archived or retrying task,
//     days later; a task asynq deleted after success has nothing to run.
//
// The adapter's tables are left out of the comparison.
package twiceasynq

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
)

// asynq's timing, as v0.26.0 runs it.
const (
	// LeaseDuration is how long a dequeued task's lease lasts; the
	// worker's heartbeater extends it while the worker lives.
	LeaseDuration = 30 * time.Second
	// RecovererCutoff is how long after its lease expired the recoverer
	// takes a task back: it lists leases that expired 30s ago or earlier.
	RecovererCutoff = 30 * time.Second
	// RecovererInterval is how often the recoverer looks.
	RecovererInterval = time.Minute
	// DefaultRedeliver is when the checks hand out again a task whose
	// worker died: its lease expired, the recoverer's cutoff passed and
	// the recoverer ran, at the latest. The retry delay that follows is
	// asynq's own: a task whose retry is not yet due is not delivered
	// then, and the queue's retry hands it out when it is.
	DefaultRedeliver = LeaseDuration + RecovererCutoff + RecovererInterval
	// defaultTimeout is what asynq's client sets when a task has neither
	// Timeout nor Deadline.
	defaultTimeout  = 30 * time.Minute
	defaultMaxRetry = 25
)

// tables are the adapter's bookkeeping tables: asynq's task hashes and its
// uniqueness locks, one row each.
var tables = []string{"twice_asynq_tasks", "twice_asynq_unique"}

const schema = `
CREATE TABLE twice_asynq_tasks (
	id text PRIMARY KEY,
	queue text NOT NULL,
	type text NOT NULL,
	payload bytea,
	headers jsonb,
	state text NOT NULL,
	max_retry int NOT NULL,
	retried int NOT NULL DEFAULT 0,
	timeout_s bigint NOT NULL,
	deadline timestamptz,
	unique_key text NOT NULL DEFAULT '',
	retention_s bigint NOT NULL DEFAULT 0,
	process_at timestamptz,
	lease_until timestamptz,
	last_err text NOT NULL DEFAULT '',
	last_failed_at timestamptz,
	completed_at timestamptz
);
CREATE TABLE twice_asynq_unique (
	key text PRIMARY KEY,
	task_id text NOT NULL,
	expires_at timestamptz NOT NULL
);
`

// Option changes how an asynq job is checked.
type Option func(*options)

type options struct {
	enqueue    []asynq.Option
	retryDelay asynq.RetryDelayFunc
	redeliver  time.Duration
}

// Enqueue are the options the producer enqueues the task with, after
// those the task was made with (asynq.NewTask's), as asynq's client
// merges them: TaskID, Unique, MaxRetry, Queue, Timeout, Deadline,
// Retention, ProcessIn, ProcessAt. Group is refused: aggregation is not
// modelled.
func Enqueue(opts ...asynq.Option) Option {
	return func(o *options) { o.enqueue = append(o.enqueue, opts...) }
}

// RetryDelay is the server's Config.RetryDelayFunc. The default is
// asynq's DefaultRetryDelayFunc without its random jitter (n⁴+15
// seconds), so runs compare.
func RetryDelay(f asynq.RetryDelayFunc) Option {
	return func(o *options) { o.retryDelay = f }
}

// Redeliver is how long after a delivery started a task whose worker died
// is handed out again (DefaultRedeliver).
func Redeliver(d time.Duration) Option {
	return func(o *options) { o.redeliver = d }
}

func defaultRetryDelay(n int, _ error, _ *asynq.Task) time.Duration {
	return time.Duration(int(math.Pow(float64(n), 4))+15) * time.Second
}

// Job is an asynq task for harness.Check, harness.Explore and the runner:
// task is what the producer enqueues (with the options of asynq.NewTask
// and Enqueue), and newHandler builds the handler for each delivery from
// the delivery's connections (d.DB, d.DSN) and clock (d.Now), as the
// worker's process would at start-up. Its ProcessTask runs with a task
// carrying the type, payload and headers, in a context where
// asynq.GetTaskID, GetRetryCount, GetMaxRetry and GetQueueName answer
// from the delivery. The task's ResultWriter is nil, as asynq.NewTask's:
// results are not modelled. The job carries the adapter's tables, created
// before the config's own setup.
func Job(name string, task *asynq.Task, newHandler func(d *harness.Delivery) asynq.Handler, opts ...Option) harness.Job {
	o := options{retryDelay: defaultRetryDelay, redeliver: DefaultRedeliver}
	for _, opt := range opts {
		opt(&o)
	}
	q := &asynqQueue{name: name, task: task, opts: o, runs: map[*asynq.TaskInfo]*run{}}
	q.msg, q.err = compose(name, task, o.enqueue)
	return harness.Job{
		Name:    name,
		Queue:   q,
		Handler: func(ctx context.Context, d *harness.Delivery) error { return q.process(ctx, d, newHandler) },
	}
}

// message is the task as asynq's client composes it.
type message struct {
	taskID    string // empty: a new ID per enqueue
	queue     string
	maxRetry  int
	timeout   time.Duration
	deadline  time.Time
	uniqueTTL time.Duration
	processIn time.Duration
	processAt time.Time
	retention time.Duration
}

// compose merges the task's own options and opts as asynq's client does,
// the last one winning, and validates them as it does.
func compose(name string, task *asynq.Task, opts []asynq.Option) (message, error) {
	m := message{queue: "default", maxRetry: defaultMaxRetry}
	if task == nil {
		return m, fmt.Errorf("twiceasynq: job %q: the task is nil", name)
	}
	if strings.TrimSpace(task.Type()) == "" {
		return m, fmt.Errorf("twiceasynq: job %q: the task's type is empty", name)
	}
	own, err := taskOptions(task)
	if err != nil {
		return m, fmt.Errorf("twiceasynq: job %q: %w", name, err)
	}
	for _, opt := range append(own, opts...) {
		switch opt.Type() {
		case asynq.MaxRetryOpt:
			m.maxRetry = opt.Value().(int)
		case asynq.QueueOpt:
			m.queue = opt.Value().(string)
			if strings.TrimSpace(m.queue) == "" {
				return m, fmt.Errorf("twiceasynq: job %q: queue name must contain one or more characters", name)
			}
		case asynq.TaskIDOpt:
			m.taskID = opt.Value().(string)
			if strings.TrimSpace(m.taskID) == "" {
				return m, fmt.Errorf("twiceasynq: job %q: task ID cannot be empty", name)
			}
		case asynq.TimeoutOpt:
			m.timeout = opt.Value().(time.Duration)
		case asynq.DeadlineOpt:
			m.deadline = opt.Value().(time.Time)
		case asynq.UniqueOpt:
			m.uniqueTTL = opt.Value().(time.Duration)
			if m.uniqueTTL < time.Second {
				return m, fmt.Errorf("twiceasynq: job %q: Unique TTL cannot be less than 1s", name)
			}
		case asynq.ProcessAtOpt:
			m.processAt, m.processIn = opt.Value().(time.Time), 0
		case asynq.ProcessInOpt:
			m.processIn, m.processAt = opt.Value().(time.Duration), time.Time{}
		case asynq.RetentionOpt:
			m.retention = opt.Value().(time.Duration)
		case asynq.GroupOpt:
			return m, fmt.Errorf("twiceasynq: job %q: %s: task aggregation is not modelled", name, opt)
		}
	}
	if m.timeout == 0 && m.deadline.IsZero() {
		m.timeout = defaultTimeout
	}
	return m, nil
}

// asynqQueue is asynq's bookkeeping for one job, as a queue.Queue.
type asynqQueue struct {
	name string
	task *asynq.Task
	opts options
	msg  message
	err  error // from compose: reported at the first Enqueue

	mu   sync.Mutex
	runs map[*asynq.TaskInfo]*run // by the record Fetch handed out
}

// run is what the adapter knows of one delivery besides asynq's record.
type run struct {
	started    time.Time // on the harness clock
	leaseUntil time.Time
	cancelled  bool // the queue cancelled its context before it returned
}

func (q *asynqQueue) runOf(info *asynq.TaskInfo) *run {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.runs[info]
}

// cancelAfter is when asynq's processor cancels a handler that runs on:
// at the task's timeout, or when its lease expires, whichever comes
// first (a lease expires under a running handler only when its worker
// lost its heartbeats, the one way asynq hands a running task out again).
func (q *asynqQueue) cancelAfter() time.Duration {
	if q.msg.timeout > 0 && q.msg.timeout < LeaseDuration {
		return q.msg.timeout
	}
	return LeaseDuration
}

// Schema is the adapter's tables, standing in for asynq's Redis keys.
func (q *asynqQueue) Schema() queue.Schema {
	return queue.Schema{Name: "twiceasynq: the adapter's task tables", SQL: schema}
}

// Rules are asynq's lease, recoverer and timeout, and the adapter's tables.
func (q *asynqQueue) Rules() queue.Rules {
	// Fetch makes the task active under a lease, and hands out an active
	// task only once the recoverer takes it back (Redeliver).
	return queue.Rules{Redeliver: q.opts.redeliver, CancelAfter: q.cancelAfter(), Tables: tables, OneDeliveryAtATime: true}
}

// taskID is the ID asynq's client gives copy n of the task: the TaskID
// option's, or a new one. asynq draws a random UUID; the check derives
// one from the job's name and n, so clean runs compare.
func (q *asynqQueue) taskID(n int) string {
	if q.msg.taskID != "" {
		return q.msg.taskID
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", q.name, n))
	h := hex.EncodeToString(sum[:16])
	return h[:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:32]
}

// uniqueKey is asynq's base.UniqueKey: queue, type and payload checksum.
func uniqueKey(qname, typ string, payload []byte) string {
	if payload == nil {
		return "asynq:{" + qname + "}:unique:" + typ + ":"
	}
	sum := md5.Sum(payload)
	return "asynq:{" + qname + "}:unique:" + typ + ":" + hex.EncodeToString(sum[:])
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

// Enqueue is asynq's client Enqueue (or Schedule, with ProcessIn or
// ProcessAt): with Unique it takes the uniqueness lock first and keeps it
// even when the task ID then conflicts, as asynq's script does.
func (q *asynqQueue) Enqueue(ctx context.Context, op queue.Op) (queue.Enqueued, error) {
	if q.err != nil {
		return queue.Enqueued{}, q.err
	}
	m, id := q.msg, q.taskID(op.Job)
	state, processAt := "pending", op.Now
	switch {
	case !m.processAt.IsZero() && m.processAt.After(op.Now):
		state, processAt = "scheduled", m.processAt
	case m.processIn > 0:
		state, processAt = "scheduled", op.Now.Add(m.processIn)
	}
	var deadline *time.Time
	if !m.deadline.IsZero() {
		deadline = &m.deadline
	}
	return inTx(ctx, op.Conn, func(tx pgx.Tx) (queue.Enqueued, error) {
		key := ""
		if m.uniqueTTL > 0 {
			key = uniqueKey(m.queue, q.task.Type(), q.task.Payload())
			ttl := m.uniqueTTL
			if state == "scheduled" {
				ttl = processAt.Sub(op.Now) + m.uniqueTTL
			}
			var holder string
			err := tx.QueryRow(ctx, `
				INSERT INTO twice_asynq_unique AS u (key, task_id, expires_at) VALUES ($1, $2, $3)
				ON CONFLICT (key) DO UPDATE SET task_id = EXCLUDED.task_id, expires_at = EXCLUDED.expires_at
					WHERE u.expires_at <= $4
				RETURNING task_id`, key, id, op.Now.Add(ttl), op.Now).Scan(&holder)
			if errors.Is(err, pgx.ErrNoRows) {
				if err := tx.QueryRow(ctx, `SELECT task_id FROM twice_asynq_unique WHERE key = $1`, key).Scan(&holder); err != nil {
					return queue.Enqueued{}, fmt.Errorf("reading unique lock %s: %w", key, err)
				}
				return queue.Enqueued{JobID: id, Duplicate: true,
					Reason: fmt.Sprintf("asynq: %v (Unique(%v): task %s holds the lock %s)", asynq.ErrDuplicateTask, m.uniqueTTL, holder, key)}, nil
			}
			if err != nil {
				return queue.Enqueued{}, fmt.Errorf("taking unique lock %s: %w", key, err)
			}
		}
		tag, err := tx.Exec(ctx, `
			INSERT INTO twice_asynq_tasks (id, queue, type, payload, headers, state, max_retry, timeout_s, deadline, unique_key, retention_s, process_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
			ON CONFLICT (id) DO NOTHING`,
			id, m.queue, q.task.Type(), q.task.Payload(), q.task.Headers(), state, m.maxRetry, int64(m.timeout.Seconds()), deadline, key,
			int64(m.retention.Seconds()), processAt)
		if err != nil {
			return queue.Enqueued{}, fmt.Errorf("enqueueing task %s: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			var have string
			if err := tx.QueryRow(ctx, `SELECT state FROM twice_asynq_tasks WHERE id = $1`, id).Scan(&have); err != nil {
				return queue.Enqueued{}, err
			}
			return queue.Enqueued{JobID: id, Duplicate: true,
				Reason: fmt.Sprintf("asynq: %v (TaskID(%q) is %s)", asynq.ErrTaskIDConflict, id, have)}, nil
		}
		return queue.Enqueued{JobID: id}, nil
	})
}

// row is a task's record in the adapter's table.
type row struct {
	id, queue, typ, state, lastErr  string
	payload                         []byte
	headers                         map[string]string
	maxRetry, retried               int
	timeoutS, retentionS            int64
	deadline, processAt, leaseUntil *time.Time
	lastFailedAt, completedAt       *time.Time
}

func readRow(ctx context.Context, tx pgx.Tx, id string) (*row, error) {
	r := &row{}
	err := tx.QueryRow(ctx, `
		SELECT id, queue, type, state, last_err, payload, headers, max_retry, retried, timeout_s, retention_s,
			deadline, process_at, lease_until, last_failed_at, completed_at
		FROM twice_asynq_tasks WHERE id = $1 FOR UPDATE`, id).Scan(
		&r.id, &r.queue, &r.typ, &r.state, &r.lastErr, &r.payload, &r.headers, &r.maxRetry, &r.retried, &r.timeoutS, &r.retentionS,
		&r.deadline, &r.processAt, &r.leaseUntil, &r.lastFailedAt, &r.completedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading task %s: %w", id, err)
	}
	return r, nil
}

func (r *row) info(state asynq.TaskState) *asynq.TaskInfo {
	i := &asynq.TaskInfo{ID: r.id, Queue: r.queue, Type: r.typ, Payload: r.payload, Headers: r.headers, State: state,
		MaxRetry: r.maxRetry, Retried: r.retried, LastErr: r.lastErr,
		Timeout: time.Duration(r.timeoutS) * time.Second, Retention: time.Duration(r.retentionS) * time.Second}
	if r.lastFailedAt != nil {
		i.LastFailedAt = *r.lastFailedAt
	}
	if r.deadline != nil {
		i.Deadline = *r.deadline
	}
	return i
}

// retryTx is asynq's broker Retry: the failure counts (retried + 1) and
// the task waits in the retry set until at + the retry delay.
func (q *asynqQueue) retryTx(ctx context.Context, tx pgx.Tx, r *row, at time.Time, cause error) (time.Time, error) {
	due := at.Add(q.opts.retryDelay(r.retried, cause, asynq.NewTask(r.typ, r.payload)))
	_, err := tx.Exec(ctx, `
		UPDATE twice_asynq_tasks SET state = 'retry', retried = retried + 1, process_at = $2, lease_until = NULL,
			last_err = $3, last_failed_at = $4
		WHERE id = $1`, r.id, due, cause.Error(), at)
	return due, err
}

// archiveTx is asynq's broker Archive: retries exhausted, or SkipRetry.
func archiveTx(ctx context.Context, tx pgx.Tx, id string, at time.Time, cause error) error {
	_, err := tx.Exec(ctx, `
		UPDATE twice_asynq_tasks SET state = 'archived', process_at = NULL, lease_until = NULL, last_err = $2, last_failed_at = $3
		WHERE id = $1`, id, cause.Error(), at)
	return err
}

// doneTx is asynq's broker Done (the task is deleted) or, with
// Retention, MarkAsComplete; either releases the task's uniqueness lock.
func doneTx(ctx context.Context, tx pgx.Tx, r *row, at time.Time) error {
	if r.retentionS > 0 {
		if _, err := tx.Exec(ctx, `UPDATE twice_asynq_tasks SET state = 'completed', completed_at = $2, lease_until = NULL WHERE id = $1`, r.id, at); err != nil {
			return err
		}
	} else if _, err := tx.Exec(ctx, `DELETE FROM twice_asynq_tasks WHERE id = $1`, r.id); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `DELETE FROM twice_asynq_unique WHERE task_id = $1`, r.id)
	return err
}

// recoverTx is asynq's recoverer at now: an active task whose lease
// expired RecovererCutoff ago is retried (or archived when its retries
// are spent) with ErrLeaseExpired, as of the moment the recoverer could
// first see it.
func (q *asynqQueue) recoverTx(ctx context.Context, tx pgx.Tx, r *row, now time.Time) error {
	if r.state != "active" || r.leaseUntil == nil || r.leaseUntil.Add(RecovererCutoff).After(now) {
		return nil
	}
	at := r.leaseUntil.Add(RecovererCutoff)
	if r.retried >= r.maxRetry {
		if err := archiveTx(ctx, tx, r.id, at, asynq.ErrLeaseExpired); err != nil {
			return err
		}
		r.state = "archived"
		return nil
	}
	due, err := q.retryTx(ctx, tx, r, at, asynq.ErrLeaseExpired)
	if err != nil {
		return err
	}
	r.state, r.retried, r.processAt = "retry", r.retried+1, &due
	return nil
}

// Fetch hands the task out as asynq would at op.Now: its recoverer takes
// back a task whose lease expired, a redrive is the Inspector's RunTask,
// its forwarder moves a due retry or scheduled task to pending, and its
// processor dequeues a pending task under a new lease.
func (q *asynqQueue) Fetch(ctx context.Context, op queue.Op) (queue.Fetched, error) {
	return inTx(ctx, op.Conn, func(tx pgx.Tx) (queue.Fetched, error) {
		r, err := readRow(ctx, tx, op.JobID)
		if err != nil {
			return queue.Fetched{}, err
		}
		if r == nil {
			return queue.Fetched{Done: true, Reason: fmt.Sprintf("asynq deleted task %s when it succeeded", op.JobID)}, nil
		}
		if err := q.recoverTx(ctx, tx, r, op.Now); err != nil {
			return queue.Fetched{}, fmt.Errorf("recovering task %s: %w", r.id, err)
		}
		if op.Kind == queue.DeliveryRedrive {
			switch r.state {
			case "completed":
				return queue.Fetched{Done: true, Reason: fmt.Sprintf("asynq task %s is completed, so nobody runs it again", r.id)}, nil
			case "archived", "retry", "scheduled":
				r.state, r.processAt = "pending", &op.Now // Inspector.RunTask
			}
		}
		if (r.state == "retry" || r.state == "scheduled") && r.processAt != nil && !r.processAt.After(op.Now) {
			r.state = "pending"
		}
		switch r.state {
		case "pending":
			lease := op.Now.Add(LeaseDuration)
			if _, err := tx.Exec(ctx, `UPDATE twice_asynq_tasks SET state = 'active', process_at = NULL, lease_until = $2 WHERE id = $1`, r.id, lease); err != nil {
				return queue.Fetched{}, fmt.Errorf("dequeueing task %s: %w", r.id, err)
			}
			r.leaseUntil = &lease
			info := r.info(asynq.TaskStateActive)
			q.mu.Lock()
			q.runs[info] = &run{started: op.Now, leaseUntil: lease}
			q.mu.Unlock()
			return queue.Fetched{Delivered: true, Attempt: r.retried + 1, Job: info}, nil
		case "active":
			return queue.Fetched{Reason: fmt.Sprintf("asynq task %s is active (retry count %d) and its lease holds until %s; the recoverer takes it back %v after the lease expires",
				r.id, r.retried, r.leaseUntil.Sub(op.Now), RecovererCutoff)}, nil
		case "archived":
			return queue.Fetched{Reason: fmt.Sprintf("asynq task %s is archived after %d retries: %s", r.id, r.retried, r.lastErr)}, nil
		case "completed":
			return queue.Fetched{Done: true, Reason: fmt.Sprintf("asynq task %s is completed", r.id)}, nil
		}
		return queue.Fetched{Reason: fmt.Sprintf("asynq task %s is in %s until %s (retry count %d)", r.id, r.state, r.processAt.Sub(op.Now), r.retried)}, nil
	})
}

// Ack is asynq's processor after ProcessTask returned nil.
func (q *asynqQueue) Ack(ctx context.Context, op queue.Op) (queue.Settled, error) {
	return q.settle(ctx, op, nil)
}

// Nack is asynq's processor after ProcessTask returned err: RevokeTask
// deletes the task, SkipRetry or spent retries archive it, any other
// error retries it after the retry delay.
func (q *asynqQueue) Nack(ctx context.Context, op queue.Op, err error) (queue.Settled, error) {
	return q.settle(ctx, op, err)
}

// settle records how a delivery ended, as asynq's processor would: only
// while the delivery's lease is valid. A handler whose context the queue
// cancelled ended for asynq at that moment, with the context's error,
// whatever it returned later.
func (q *asynqQueue) settle(ctx context.Context, op queue.Op, herr error) (queue.Settled, error) {
	info, ok := op.Queued.(*asynq.TaskInfo)
	if !ok || info == nil {
		return queue.Settled{}, fmt.Errorf("the delivery of task %s carries no asynq task record (%T)", op.JobID, op.Queued)
	}
	rn := q.runOf(info)
	if rn == nil {
		return queue.Settled{}, fmt.Errorf("task %s was not handed out by this queue", op.JobID)
	}
	q.mu.Lock()
	cancelled := rn.cancelled
	delete(q.runs, info) // a delivery is settled once
	q.mu.Unlock()
	at := op.Now
	if cancelled {
		at = rn.started.Add(q.cancelAfter())
		herr = context.DeadlineExceeded
		if q.cancelAfter() >= LeaseDuration {
			herr = asynq.ErrLeaseExpired
		}
	}
	return inTx(ctx, op.Conn, func(tx pgx.Tx) (queue.Settled, error) {
		r, err := readRow(ctx, tx, info.ID)
		if err != nil {
			return queue.Settled{}, err
		}
		leased := r != nil && r.state == "active" && r.leaseUntil != nil && r.leaseUntil.Equal(rn.leaseUntil) && at.Before(rn.leaseUntil)
		if !leased {
			// The processor writes nothing once the lease is gone; the
			// recoverer takes the task back.
			return q.current(ctx, tx, r, op)
		}
		switch {
		case herr == nil:
			if err := doneTx(ctx, tx, r, at); err != nil {
				return queue.Settled{}, fmt.Errorf("marking task %s done: %w", r.id, err)
			}
			return queue.Settled{Outcome: queue.Completed}, nil
		case errors.Is(herr, asynq.RevokeTask):
			if err := doneTx(ctx, tx, r, at); err != nil {
				return queue.Settled{}, fmt.Errorf("revoking task %s: %w", r.id, err)
			}
			return queue.Settled{Outcome: queue.Cancelled, Detail: "asynq.RevokeTask"}, nil
		case r.retried >= r.maxRetry || errors.Is(herr, asynq.SkipRetry):
			if err := archiveTx(ctx, tx, r.id, at, herr); err != nil {
				return queue.Settled{}, fmt.Errorf("archiving task %s: %w", r.id, err)
			}
			why := fmt.Sprintf("archived after %d of %d retries", r.retried, r.maxRetry)
			if errors.Is(herr, asynq.SkipRetry) {
				why = "archived: asynq.SkipRetry"
			}
			return queue.Settled{Outcome: queue.Discarded, Detail: why}, nil
		}
		due, err := q.retryTx(ctx, tx, r, at, herr)
		if err != nil {
			return queue.Settled{}, fmt.Errorf("retrying task %s: %w", r.id, err)
		}
		after := max(due.Sub(op.Now), 0)
		return queue.Settled{Outcome: queue.Retry, After: after,
			Detail: fmt.Sprintf("in %v (retry count %d of %d)", after, r.retried+1, r.maxRetry)}, nil
	})
}

// current says how the task stands when a delivery's lease was gone at
// its end: the processor recorded nothing.
func (q *asynqQueue) current(ctx context.Context, tx pgx.Tx, r *row, op queue.Op) (queue.Settled, error) {
	if r == nil {
		return queue.Settled{Outcome: queue.Completed, Detail: "lease expired; another delivery completed the task"}, nil
	}
	if err := q.recoverTx(ctx, tx, r, op.Now); err != nil {
		return queue.Settled{}, err
	}
	switch r.state {
	case "completed":
		return queue.Settled{Outcome: queue.Completed, Detail: "lease expired; another delivery completed the task"}, nil
	case "archived":
		return queue.Settled{Outcome: queue.Discarded, Detail: "archived: " + r.lastErr}, nil
	case "active":
		after := max(r.leaseUntil.Add(RecovererCutoff).Sub(op.Now), 0)
		return queue.Settled{Outcome: queue.Retry, After: after, Detail: "lease expired; nothing recorded, the recoverer takes the task back"}, nil
	}
	after := time.Duration(0)
	if r.processAt != nil {
		after = max(r.processAt.Sub(op.Now), 0)
	}
	return queue.Settled{Outcome: queue.Retry, After: after, Detail: fmt.Sprintf("lease expired; nothing recorded, the task is in %s (retry count %d)", r.state, r.retried)}, nil
}

// process runs one delivery: the handler gets asynq's task and context.
// A panic is turned into an error, as asynq's processor does, naming the
// job and the delivery.
func (q *asynqQueue) process(ctx context.Context, d *harness.Delivery, newHandler func(*harness.Delivery) asynq.Handler) (err error) {
	info, ok := d.Queued.(*asynq.TaskInfo)
	if !ok || info == nil {
		return fmt.Errorf("twiceasynq: job %q, task %s: the delivery carries no asynq task record (%T); run it through twiceasynq.Job", q.name, d.JobID, d.Queued)
	}
	which := fmt.Sprintf("twiceasynq: job %q, task %s (type %q, retry count %d)", q.name, info.ID, info.Type, info.Retried)
	h := newHandler(d)
	if h == nil {
		return fmt.Errorf("%s: newHandler returned a nil handler", which)
	}
	task := asynq.NewTaskWithHeaders(info.Type, info.Payload, info.Headers)
	if mux, ok := h.(*asynq.ServeMux); ok {
		if _, pattern := mux.Handler(task); pattern == "" {
			return fmt.Errorf("%s: the asynq.ServeMux has no handler for type %q: %w", which, info.Type, asynq.ErrHandlerNotFound)
		}
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: handler panicked: %v", which, p)
		}
		if ctx.Err() != nil {
			if rn := q.runOf(info); rn != nil {
				q.mu.Lock()
				rn.cancelled = true
				q.mu.Unlock()
			}
		}
	}()
	return h.ProcessTask(withTask(ctx, info), task)
}
