package execute

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/text"
)

// queueRun drives a job's Queue through one execution: the harness's
// connection, the operation running on it, and what the queue said about
// each job. Only the event loop touches it; an operation runs in a
// goroutine of its own and answers with an evQueue event, so one that
// waits on a lock a delivery holds (an ack behind the handler's open
// transaction) never stops the loop.
type queueRun struct {
	q      queue.Queue
	name   string // the job's
	db     string // the scenario database's name
	kept   *queueConns
	rules  queue.Rules
	conn   *pgx.Conn
	pid    uint32
	ctx    context.Context // operations run in it; cancelled by close
	cancel context.CancelFunc

	running *queueCall   // the operation on conn
	blocked bool         // the server says it waits on a lock
	asked   int          // how often the server was asked whether running waits
	waiting []*queueCall // operations waiting for conn, in order
	ops     chan struct{}

	jobs map[int]*queuedJob // by schedule job number
}

// queuedJob is what the queue said about one job of the schedule.
type queuedJob struct {
	enq     queue.Enqueued
	settled *queue.Settled // the last Ack or Nack, in the order they ran
	done    bool           // a Fetch said the job is finished
	refused string         // the last Fetch's reason for not handing it out
}

// queueCall is one Queue operation of a delivery.
type queueCall struct {
	d    *deliveryRun
	what string // "fetch", "ack", "nack"
	run  func(ctx context.Context, op queue.Op) (any, error)
	op   queue.Op

	answer any
	err    error
}

// openQueue connects to the scenario's database, outside the proxy (or
// takes the connection an earlier scenario on it kept), and enqueues
// every job of the schedule, the original first.
func (e *execution) openQueue(ctx context.Context) (*queueRun, error) {
	conn := e.r.queueConns.take(e.db.Name)
	if conn == nil {
		var err error
		conn, err = pgx.Connect(ctx, e.db.ConnString)
		if err != nil {
			return nil, fmt.Errorf("connecting for job %q's queue: %w", e.r.job.Name, err)
		}
	}
	q := &queueRun{q: e.r.job.Queue, name: e.r.job.Name, db: e.db.Name, kept: &e.r.queueConns, rules: e.r.cfg.Rules, conn: conn, pid: conn.PgConn().PID(),
		ops: make(chan struct{}, 1), jobs: map[int]*queuedJob{}}
	q.ctx, q.cancel = context.WithCancel(ctx)
	var nums []int
	for _, d := range e.deliveries {
		// A late copy (faults.Scheduled.Late) is enqueued as its
		// delivery starts (begin).
		if !slices.Contains(nums, d.spec.Job) && !d.spec.Late {
			nums = append(nums, d.spec.Job)
		}
	}
	slices.Sort(nums)
	for _, n := range nums {
		enq, err := q.call(ctx, "enqueue", queue.Op{Conn: conn, Now: e.clock.Now(), Job: n}, func(ctx context.Context, op queue.Op) (queue.Enqueued, error) {
			return q.q.Enqueue(ctx, op)
		})
		if err == nil {
			err = q.checkEnqueued(n, enq)
		}
		if err != nil {
			q.close(ctx)
			return nil, err
		}
		q.jobs[n] = &queuedJob{enq: enq}
	}
	q.nameJobs(e)
	return q, nil
}

// checkEnqueued says what is wrong with the queue's answer to the Enqueue
// of job n.
func (q *queueRun) checkEnqueued(n int, enq queue.Enqueued) error {
	if !enq.Duplicate && enq.JobID == "" {
		return blame.Userf("job %q: its queue's Enqueue of job %d returned no job ID and no duplicate", q.name, n)
	}
	if n == 1 && enq.Duplicate {
		return blame.Userf("job %q: its queue refused the original job as a duplicate (%s), so it is never delivered; does the setup already hold a job with its unique key?", q.name, enq.Reason)
	}
	return nil
}

// nameJobs gives every delivery of an enqueued job its job ID.
func (q *queueRun) nameJobs(e *execution) {
	for _, d := range e.deliveries {
		if job := q.jobs[d.spec.Job]; job != nil {
			d.outcome.JobID = job.enq.JobID
		}
	}
}

// call runs a Queue method now, on the event loop: only Enqueue, before
// any delivery runs, so nothing can hold a lock it waits on. A panic is an
// error naming the method.
func (q *queueRun) call(ctx context.Context, what string, op queue.Op, f func(context.Context, queue.Op) (queue.Enqueued, error)) (out queue.Enqueued, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = blame.Userf("job %q: its queue's %s of job %d panicked: %v", q.name, what, op.Job, p)
		}
	}()
	out, err = f(ctx, op)
	if err != nil {
		// Most often the job's own input (arguments that do not
		// marshal), so not labelled internal.
		return out, blame.Userf("job %q: its queue could not %s job %d: %w", q.name, what, op.Job, err)
	}
	return out, nil
}

func (q *queueRun) close(ctx context.Context) {
	// An operation still running (the scenario was interrupted) ends with
	// its context; wait for it before the connection goes.
	q.cancel()
	if q.running != nil {
		<-q.ops
	}
	q.kept.put(context.WithoutCancel(ctx), q.db, q.conn)
}

// begin asks the queue for d's delivery: at once, or, when the queue
// cancels deliveries that run too long, once those it cancelled now have
// reacted.
func (q *queueRun) begin(e *execution, d *deliveryRun) {
	job := q.jobs[d.spec.Job]
	if job == nil {
		// A late copy: the producer enqueues it now, at this time on
		// the harness clock; the queue's answer comes back to handOut.
		q.submit(e, &queueCall{d: d, what: "enqueue",
			op: queue.Op{Job: d.spec.Job},
			run: func(ctx context.Context, op queue.Op) (any, error) {
				enq, err := q.q.Enqueue(ctx, op)
				if err != nil {
					// Most often the job's own input (arguments that do
					// not marshal), so not labelled internal.
					return nil, userEnqueueError{blame.Userf("job %q: its queue could not enqueue job %d: %w", q.name, op.Job, err)}
				}
				return enq, nil
			}})
		return
	}
	q.handOut(e, d, job)
}

// userEnqueueError is an Enqueue's own error: done reports it as it is,
// not as twice's breakage.
type userEnqueueError struct{ error }

func (u userEnqueueError) Unwrap() error { return u.error }

// handOut asks the queue for d's delivery of an enqueued job.
func (q *queueRun) handOut(e *execution, d *deliveryRun, job *queuedJob) {
	if job.enq.Duplicate {
		d.outcome.NotDelivered = "the queue refused the producer's copy as a duplicate: " + job.enq.Reason
		e.move(d, onRefuse)
		return
	}
	if e.cancelOverdue() {
		e.move(d, onHold)
		return
	}
	q.fetch(e, d)
}

// holds reports whether steps must wait: an operation runs on the
// queue's connection and does not wait on a lock.
func (q *queueRun) holds() bool {
	return q.running != nil && !q.blocked
}

func (q *queueRun) fetch(e *execution, d *deliveryRun) {
	q.submit(e, &queueCall{d: d, what: "fetch",
		op:  queue.Op{Job: d.spec.Job, JobID: d.outcome.JobID, Kind: d.kind},
		run: func(ctx context.Context, op queue.Op) (any, error) { return q.q.Fetch(ctx, op) }})
}

// settle acks or nacks d, whose handler returned err.
func (q *queueRun) settle(e *execution, d *deliveryRun, err error) {
	e.move(d, onSettle)
	c := &queueCall{d: d, what: "ack", op: queue.Op{Job: d.spec.Job, JobID: d.outcome.JobID, Kind: d.kind, Queued: d.queued},
		run: func(ctx context.Context, op queue.Op) (any, error) { return q.q.Ack(ctx, op) }}
	if err != nil {
		c.what = "nack"
		c.run = func(ctx context.Context, op queue.Op) (any, error) { return q.q.Nack(ctx, op, err) }
	}
	q.submit(e, c)
}

func (q *queueRun) submit(e *execution, c *queueCall) {
	q.waiting = append(q.waiting, c)
	q.next(e)
}

// next starts the oldest waiting operation when none runs and no
// granted step is out: a step granted before a delivery returned
// (another delivery's COMMIT, say, or a statement that waited on the
// returned delivery's lock) finishes first, so what the operation reads
// never depends on which of the two the machine ran sooner. Steps go on
// being granted meanwhile. A held step (holds.go) does not count: it
// waits for a step of another delivery, not for time.
func (q *queueRun) next(e *execution) {
	if q.running != nil || len(q.waiting) == 0 || e.stepOut() {
		return
	}
	c := q.waiting[0]
	q.waiting = q.waiting[1:]
	q.running, q.blocked, q.asked = c, false, 0
	c.op.Conn, c.op.Now = q.conn, e.clock.Now()
	q.settledBeside(e, c)
	go func() {
		defer func() { q.ops <- struct{}{} }()
		defer func() {
			if p := recover(); p != nil {
				c.err = fmt.Errorf("panicked: %v", p)
			}
			e.events.push(event{kind: evQueue, d: c.d, call: c})
		}()
		c.answer, c.err = c.run(q.ctx, c.op)
	}()
}

// settledBeside records, as c starts, every other delivery whose handler
// runs, when the queue's handlers settle with it themselves
// (queue.Rules.HandlerSettles): whether such a handler has settled yet,
// which a fetch, an ack or a nack may read, is timing. An enqueue reads
// no delivery's settling.
func (q *queueRun) settledBeside(e *execution, c *queueCall) {
	if !q.rules.HandlerSettles || c.what == "enqueue" {
		return
	}
	for _, o := range e.deliveries {
		if o != c.d && o.life.acting() && !o.handlerDone.Load() {
			e.raced(result.SettledBeside, c.d, o, 0) // races.go
		}
	}
}

// done takes an operation's answer.
func (q *queueRun) done(e *execution, ev event) {
	<-q.ops
	q.running = nil
	c, d := ev.call, ev.d
	var user userEnqueueError
	if errors.As(c.err, &user) {
		e.failure = user.error
		return
	}
	if c.err != nil {
		e.failure = fmt.Errorf("job %q: the queue's %s for delivery %s of job %s: %w", e.r.job.Name, c.what, d.spec.Label(), d.outcome.JobID, c.err)
		return
	}
	job := q.jobs[d.spec.Job]
	switch a := c.answer.(type) {
	case queue.Fetched:
		if !a.Delivered && q.awaitDue(e, d, a) {
			break
		}
		if !a.Delivered {
			job.done = job.done || a.Done
			job.refused = cmp.Or(a.Reason, "the queue did not hand the job out")
			if !a.DueAt.IsZero() {
				job.refused = fmt.Sprintf("the job is scheduled for %s and was never due: %s", e.sinceStart(a.DueAt), job.refused)
			}
			d.outcome.NotDelivered, d.outcome.QueueDone = job.refused, job.done
			e.move(d, onRefuse)
			break
		}
		d.queued = a.Job
		if a.Attempt > 0 {
			d.outcome.Attempt = a.Attempt
		}
		if err := e.start(e.ctx, d); err != nil {
			e.failure = err
		}
	case queue.Enqueued:
		if err := q.checkEnqueued(d.spec.Job, a); err != nil {
			e.failure = err
			return
		}
		job = &queuedJob{enq: a}
		q.jobs[d.spec.Job] = job
		q.nameJobs(e)
		q.handOut(e, d, job)
	case queue.Settled:
		job.settled = &a
		d.settledAs = a.Outcome
		d.outcome.Settled = a.Outcome.String()
		if a.Detail != "" {
			d.outcome.Settled += ": " + a.Detail
		}
		e.move(d, onFinish)
	default:
		e.failure = fmt.Errorf("job %q: the queue's %s answered %T", e.r.job.Name, c.what, c.answer)
	}
	q.next(e)
	e.events.poke()
}

// maxDueWaits bounds how often one delivery's clock moves to the due
// time its queue names (queue.Fetched.DueAt): a job scheduled once is due
// after one move; one whose due time keeps moving ahead of the clock is
// never handed out.
const maxDueWaits = 3

// awaitDue moves the harness clock to the job's due time when the queue
// says the job is scheduled for later, and asks the queue again, as its
// workers would once the time had come. It reports whether it did; it
// does not once the due time is not ahead of the clock (the queue holds
// the job for another reason) or after maxDueWaits moves.
func (q *queueRun) awaitDue(e *execution, d *deliveryRun, a queue.Fetched) bool {
	now := e.clock.Now()
	if a.DueAt.IsZero() || !a.DueAt.After(now) || d.dueWaits >= maxDueWaits {
		return false
	}
	d.dueWaits++
	wait := a.DueAt.Sub(now)
	e.clock.Advance(wait)
	d.outcome.Waited += wait
	q.fetch(e, d)
	return true
}

// checkStall asks the server whether the running operation waits on a
// lock a delivery holds; the loop then lets steps through until it is
// released.
func (q *queueRun) checkStall(ctx context.Context, e *execution) error {
	if q.running == nil || q.blocked {
		return nil
	}
	q.asked++
	waits, err := e.waitsOnLock(ctx, q.pid)
	if err != nil {
		return err
	}
	if waits {
		q.blocked = true
		e.lockWaits++
	}
	return nil
}

// maxQueuePoll bounds how long a running operation goes unasked: the
// server is asked lockPoll after it started, then at doubling intervals up
// to this, so an operation that takes long on a busy machine, without
// waiting on any lock, costs a few questions rather than one per lockPoll.
const maxQueuePoll = 8 * lockPoll

// wake is when the loop must look again for the queue's sake.
func (q *queueRun) wake(e *execution) (time.Duration, bool) {
	if q.running != nil && !q.blocked {
		return min(lockPoll<<min(q.asked, 3), maxQueuePoll), true
	}
	return 0, false
}

// finished reports whether the queue holds job n as finished.
func (j *queuedJob) finished() bool {
	return j.enq.Duplicate || j.done || (j.settled != nil && j.settled.Outcome.Finished())
}

// addRetries hands out again, on a fresh worker, every job the queue
// still holds once the schedule is done: after the queue's retry or
// snooze delay, or after its redelivery time when the last delivery was
// never acked. It reports whether it added any.
func (q *queueRun) addRetries(e *execution) bool {
	added := false
	worker := 0
	for _, d := range e.deliveries {
		worker = max(worker, d.spec.Worker)
	}
	for _, last := range e.lastPerJob() {
		job := q.jobs[last.spec.Job]
		if job == nil {
			continue // a late copy never enqueued: the scenario ended before it
		}
		if job.finished() {
			continue
		}
		advance := e.r.visibilityTimeout()
		if s := job.settled; s != nil && last.outcome.Settled != "" {
			advance = s.After
		}
		worker++
		spec := faults.Scheduled{Job: last.spec.Job, Attempt: last.outcome.Attempt + 1, Worker: worker, Advance: advance}
		d := e.add(spec)
		d.outcome.QueueRetry = true
		d.outcome.JobID = job.enq.JobID
		added = true
	}
	return added
}

// incomplete says, one line per job, why a job the queue holds is not
// complete once every delivery, the queue's retries included, is over.
func (q *queueRun) incomplete(e *execution) []unfinished {
	var out []unfinished
	for _, last := range e.lastPerJob() {
		job := q.jobs[last.spec.Job]
		if job == nil {
			continue // a late copy never enqueued: the scenario ended before it
		}
		if job.enq.Duplicate || job.done || (job.settled != nil && job.settled.Outcome.Complete()) {
			continue
		}
		var delivered *deliveryRun
		for _, d := range e.deliveries {
			if d.spec.Job == last.spec.Job && d.life.started() {
				delivered = d
			}
		}
		id := job.enq.JobID
		switch {
		case job.settled != nil && job.settled.Outcome == queue.Discarded:
			out = append(out, unfinished{id, fmt.Sprintf("the queue discarded it (%s)", job.settled.Detail)})
		case delivered == nil:
			out = append(out, unfinished{id, fmt.Sprintf("the queue never handed it out: %s", job.refused)})
		case delivered.outcome.Err != "":
			out = append(out, unfinished{id, fmt.Sprintf("its last delivery %s (attempt %d) returned an error: %s",
				delivered.spec.Label(), delivered.outcome.Attempt, text.FirstLine(delivered.outcome.Err))})
		case delivered.life == dead:
			out = append(out, unfinished{id, fmt.Sprintf("its last delivery %s (attempt %d) %s", delivered.spec.Label(), delivered.outcome.Attempt, delivered.outcome.Fault)})
		default:
			out = append(out, unfinished{id, fmt.Sprintf("the queue still holds it after %d rounds of retries", maxQueueRounds)})
		}
	}
	return out
}

// withoutQueueRows leaves the queue's own tables and the rows of the jobs
// the harness enqueued out of snap; rows the handler inserted stay.
func (q *queueRun) withoutQueueRows(snap *assert.Snapshot) (*assert.Snapshot, error) {
	if snap == nil {
		return nil, nil
	}
	ids := map[string]bool{}
	for _, j := range q.jobs {
		if !j.enq.Duplicate {
			ids[j.enq.JobID] = true
		}
	}
	out := &assert.Snapshot{}
	for _, t := range snap.Tables {
		if slices.Contains(q.rules.Tables, t.Name) {
			continue
		}
		if t.Name == q.rules.JobTable {
			col := slices.IndexFunc(t.Columns, func(c assert.Column) bool { return c.Name == q.rules.JobIDColumn })
			if col < 0 {
				return nil, fmt.Errorf("the queue's job table %s has no column %q", t.Name, q.rules.JobIDColumn)
			}
			job := func(row []any) bool { return ids[fmt.Sprint(row[col])] }
			t.Rows = slices.DeleteFunc(slices.Clone(t.Rows), job)
			if t.Written != nil {
				w := *t.Written
				w.Before = slices.DeleteFunc(slices.Clone(w.Before), job)
				t.Written = &w
			}
		}
		out.Tables = append(out.Tables, t)
	}
	return out, nil
}

// snapshot reads the scenario's tables once the execution is over,
// without the queue's own.
func (e *execution) snapshot(ctx context.Context) (*assert.Snapshot, error) {
	snap, err := snapshot(ctx, e.db)
	if err != nil || e.queue == nil {
		return snap, err
	}
	return e.queue.withoutQueueRows(snap)
}

// cleanFailure says why a clean run failed, or nothing: a delivery
// returned an error the queue did not read as a snooze or a
// cancellation, or the job did not complete.
func (e *execution) cleanFailure() string {
	for _, d := range e.deliveries {
		if d.outcome.Err != "" && d.settledAs != queue.Snoozed && d.settledAs != queue.Cancelled {
			return d.outcome.Err
		}
	}
	if e.queue != nil {
		if in := e.incomplete(); len(in) > 0 {
			return strings.Join(lines(in), "; ")
		}
	}
	return ""
}
