// Package twiceasynq checks asynq handlers (github.com/hibiken/asynq) with
// twice, as asynq runs them: asynq's own client enqueues the task and
// asynq's own server delivers it, on a real Redis, so the handler gets the
// task, context and ResultWriter asynq's processor makes, and the task's
// states (pending, active, scheduled, retry, archived, completed) are the
// ones asynq writes.
//
//	func TestRewardHandler(t *testing.T) {
//		harness.Check(t, twiceasynq.Job("reward-order", rewards.NewRewardTask(9812),
//			func(d *harness.Delivery) asynq.Handler { return &rewards.RewardHandler{Pool: d.DB} }),
//			harness.Config{Setup: []harness.Setup{harness.SQL(rewards.Schema)}})
//	}
//
// # Redis
//
// Redis is found as twice finds PostgreSQL: TWICE_REDIS_URL (a server the
// tests may flush), else a local redis-server binary, started once per test
// binary as a throwaway server on a unix socket and killed with the test
// binary. Each scenario takes a database of its own and flushes it. A
// missing Redis is an error naming these ways (and Docker).
//
// # Each delivery is a worker
//
// Each delivery runs on an asynq.Server of its own (concurrency 1, built
// with asynq.NewServerFromRedisClient), as a worker process would. The
// server's processor dequeues the task and hands it to the adapter, which
// runs the production handler with it in the harness's delivery, and hands
// the handler's error back to the processor, which records it in Redis:
// done (or completed with Retention), retry with asynq's retry count,
// archived after SkipRetry or the last retry, deleted after RevokeTask.
//
// A worker that died (crash-mid-job, crash-before-ack, lost-ack) or lost
// its heartbeats (visibility-timeout) is cut off Redis: every command of
// its client fails from then on, as for a dead process, and its task stays
// active. Once its lease (30s) and the recoverer's cutoff (30s) have passed
// on the harness clock, the adapter rewinds the lease in Redis and starts a
// fresh server, whose recoverer (it runs at start) moves the task to retry
// with asynq.ErrLeaseExpired and retry count + 1, as it would in
// production a minute later.
//
// # The harness clock
//
// asynq reads the wall clock; the checks run on the harness clock. The
// adapter moves asynq's due times instead of waiting for them: a scheduled
// task (ProcessIn, ProcessAt) or a retry is run (Inspector.RunTask) when it
// is due on the harness clock, so no check waits for asynq's backoff, and
// the servers' forwarder and janitor are set never to run on their own.
// A Unique lock is made permanent after the enqueue and deleted when its
// TTL has passed on the harness clock. Fetch answers a scheduled task that
// is not yet due with queue.Fetched.DueAt, so the harness moves its clock
// there.
//
// # What the faults mean for asynq
//
//   - crash-before-ack, lost-ack, crash-mid-job, ambiguous-commit: the
//     worker is cut; the recoverer takes the task back after its lease
//     expired (DefaultRedeliver), counting a failure.
//   - visibility-timeout: the first worker lost its heartbeats: its
//     handler's context is cancelled at the lease's 30s (or the task's
//     Timeout, if sooner) and the processor records nothing.
//   - concurrent-delivery: asynq never hands out an active task whose
//     lease holds: not delivered.
//   - producer-retry: the task is enqueued twice by asynq's client; with
//     TaskID or Unique the copy is refused (ErrTaskIDConflict,
//     ErrDuplicateTask). A task completed with Retention leaves Redis
//     when its retention ends on the harness clock, as asynq's janitor
//     removes it, and frees its TaskID: producer-retry-after-dedup's
//     copy comes then.
//   - redrive: the Inspector's RunTask of an archived or retrying task; a
//     task asynq deleted after success has nothing to run.
//
// README.md in this directory (github.com/runtwice/twice/adapters/asynq) has
// the versions this adapter is tested on, its example and what each
// fault found there, and how to use it from a clone.
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
	"time"

	"github.com/hibiken/asynq"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
)

// asynq's timing, as its server runs it (hardcoded in asynq).
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

// Option changes how an asynq job is checked.
type Option func(*options)

type options struct {
	enqueue    []asynq.Option
	retryDelay asynq.RetryDelayFunc
	isFailure  func(error) bool
	redeliver  time.Duration
	middleware []asynq.MiddlewareFunc
	copyTask   func(n int, now time.Time) *asynq.Task
	produce    func(context.Context, Producing) error // Producer's
}

// Enqueue are the options the producer enqueues the task with, after
// those the task was made with (asynq.NewTask's); asynq's client merges
// them, the last one winning. Group is refused: task aggregation is not
// supported yet.
func Enqueue(opts ...asynq.Option) Option {
	return func(o *options) { o.enqueue = append(o.enqueue, opts...) }
}

// RetryDelay is the server's Config.RetryDelayFunc. The default is
// asynq's DefaultRetryDelayFunc without its random jitter (n⁴+15
// seconds), so runs compare; a func of your own must be deterministic for
// the same reason.
func RetryDelay(f asynq.RetryDelayFunc) Option {
	return func(o *options) { o.retryDelay = f }
}

// IsFailure is the server's Config.IsFailure: an error it says is no
// failure retries the task without counting a retry.
func IsFailure(f func(error) bool) Option {
	return func(o *options) { o.isFailure = f }
}

// Middleware wraps the handler in the production middleware, the first
// outermost, as asynq.ServeMux.Use does.
func Middleware(mws ...asynq.MiddlewareFunc) Option {
	return func(o *options) { o.middleware = append(o.middleware, mws...) }
}

// Copies builds the task the producer enqueues for copy n (2 and up) at
// now on the harness clock, for a producer that rebuilds its task on
// every call (a payload stamped with the time of the call): the copy is
// enqueued with what it returns instead of the original task. The
// Enqueue options apply to it as well.
func Copies(build func(n int, now time.Time) *asynq.Task) Option {
	return func(o *options) { o.copyTask = build }
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
// worker's process would at start-up. Its ProcessTask gets the task asynq's
// processor dequeued (with its ResultWriter) in a context carrying asynq's
// values (asynq.GetTaskID, GetRetryCount, GetMaxRetry, GetQueueName) and
// the harness's cancellation. Delivery.Queued is the task's
// *asynq.TaskInfo as asynq's Inspector read it when it was handed out.
func Job(name string, task *asynq.Task, newHandler func(d *harness.Delivery) asynq.Handler, opts ...Option) harness.Job {
	o := options{retryDelay: defaultRetryDelay, redeliver: DefaultRedeliver}
	for _, opt := range opts {
		opt(&o)
	}
	q := &asynqQueue{name: name, task: task, opts: o}
	q.msg, q.err = compose(name, task, o.enqueue)
	if q.err == nil && newHandler == nil {
		q.err = fmt.Errorf("twiceasynq: job %q: newHandler is nil", name)
	}
	if q.err == nil && o.copyTask != nil && o.produce != nil {
		q.err = fmt.Errorf("twiceasynq: job %q: both Copies and Producer say how the task is enqueued; pass Producer alone, whose code builds each copy", name)
	}
	return harness.Job{
		Name:    name,
		Queue:   q,
		Handler: func(ctx context.Context, d *harness.Delivery) error { return q.process(ctx, d, newHandler) },
	}
}

// message is what the adapter reads of the task's options: asynq's client
// applies them itself; the adapter needs them for its Rules and its clock.
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
			return m, fmt.Errorf("twiceasynq: job %q: %s: task aggregation (Group) is not supported by twiceasynq yet; check the aggregated task's handler as a job of its own", name, opt)
		}
	}
	if m.timeout == 0 && m.deadline.IsZero() {
		m.timeout = defaultTimeout
	}
	return m, nil
}

// asynqQueue is one job's queue: asynq on Redis, one scenario per Redis
// database.
type asynqQueue struct {
	name string
	task *asynq.Task
	opts options
	msg  message
	err  error // from compose: reported at the first Enqueue
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

// Schema is the zero Schema: asynq keeps its queue in Redis.
func (q *asynqQueue) Schema() queue.Schema { return queue.Schema{} }

// Rules are asynq's lease, recoverer and timeout, and how long it refuses
// a copy: Unique's TTL, or for as long as the task is held with TaskID
// (with Retention, until the retention after its completion ends).
func (q *asynqQueue) Rules() queue.Rules {
	r := queue.Rules{Redeliver: q.opts.redeliver, CancelAfter: q.cancelAfter(), OneDeliveryAtATime: true}
	switch {
	case q.msg.uniqueTTL > 0:
		r.Dedup = q.msg.uniqueTTL
	case q.msg.taskID != "" && q.msg.retention > 0:
		r.Dedup = q.msg.retention // held while retained, once completed
	case q.msg.taskID != "", q.opts.produce != nil:
		r.Dedup = -1
	}
	return r
}

// taskID is the ID the adapter gives copy n of the task when the producer
// sets none. asynq's client draws a random UUID; the check derives one
// from the job's name and n, so clean runs compare (a handler writing the
// task's ID writes the same one in every run).
func (q *asynqQueue) taskID(n int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", q.name, n))
	h := hex.EncodeToString(sum[:16])
	return h[:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:32]
}

// uniqueKey is asynq's Redis key for a Unique task's lock: queue, type and
// payload checksum.
func uniqueKey(qname, typ string, payload []byte) string {
	if payload == nil {
		return "asynq:{" + qname + "}:unique:" + typ + ":"
	}
	sum := md5.Sum(payload)
	return "asynq:{" + qname + "}:unique:" + typ + ":" + hex.EncodeToString(sum[:])
}

// process runs one delivery: the handler gets asynq's task and context.
// A panic is turned into an error, as asynq's processor does, naming the
// job and the delivery.
func (q *asynqQueue) process(ctx context.Context, d *harness.Delivery, newHandler func(*harness.Delivery) asynq.Handler) (err error) {
	info, ok := d.Queued.(*asynq.TaskInfo)
	if !ok || info == nil {
		return fmt.Errorf("twiceasynq: job %q, task %s: the delivery carries no asynq task record (%T); run it through twiceasynq.Job", q.name, d.JobID, d.Queued)
	}
	h := deliveryOf(info)
	if h == nil {
		return fmt.Errorf("twiceasynq: job %q, task %s: the delivery was not handed out by asynq's processor through twiceasynq", q.name, info.ID)
	}
	which := fmt.Sprintf("twiceasynq: job %q, task %s (type %q, retry count %d)", q.name, info.ID, info.Type, info.Retried)
	handler := newHandler(d)
	if handler == nil {
		return fmt.Errorf("%s: newHandler returned a nil handler", which)
	}
	if mux, ok := handler.(*asynq.ServeMux); ok {
		if _, pattern := mux.Handler(h.task); pattern == "" {
			return fmt.Errorf("%s: the asynq.ServeMux has no handler for type %q: %w", which, info.Type, asynq.NotFound(ctx, h.task))
		}
	}
	for i := len(q.opts.middleware) - 1; i >= 0; i-- {
		handler = q.opts.middleware[i](handler)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: handler panicked: %v", which, p)
		}
		if ctx.Err() != nil {
			h.markCancelled()
		}
	}()
	return handler.ProcessTask(queue.ValuesFirst(ctx, context.WithoutCancel(h.ctx)), h.task) // the delivery's cancellation, asynq's task values
}

// errCut is what a cut worker's Redis client answers.
var errCut = errors.New("twiceasynq: this worker is dead (cut off Redis by the check)")
