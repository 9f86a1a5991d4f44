package execute

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/freshdb"
	"github.com/runtwice/twice/internal/goid"
	"github.com/runtwice/twice/internal/render"
	"github.com/runtwice/twice/internal/text"
	"github.com/runtwice/twice/internal/wireproxy"
)

// abandonGrace is how long, in real time, the harness gives an abandoned
// delivery's goroutine to return once its scenario is over before it stops
// waiting and reports it. A dead worker is not waited for: what it does
// later is refused and never recorded.
const abandonGrace = 250 * time.Millisecond

// lockPoll is how often the executor asks the server whether a granted
// step that has not returned waits on a lock. It asks; it never assumes.
const lockPoll = 2 * time.Millisecond

// backendsStarted and deliveryConnects count, over the process, the server
// backends the deliveries' proxies started and the connections deliveries
// made: how many connects the kept backends spared (BenchmarkLedger).
var backendsStarted, deliveryConnects atomic.Int64

// execution runs one schedule on one database: it starts deliveries when
// the schedule says, and grants their steps one at a time, in the
// schedule's order, through each delivery's wire proxy. Only the event loop
// (run) touches its fields; hooks and handler goroutines talk to it through
// events.
type execution struct {
	r      *Executor
	sched  faults.Schedule
	db     *freshdb.Database
	clock  Clock
	began  time.Time // the clock when the execution began, when job 1 was enqueued
	events eventQueue

	deliveries []*deliveryRun
	workers    map[int]Handler // live workers by number
	pos        int             // next entry of sched.Order
	granted    []int           // delivery numbers in the order steps were granted
	retries    int             // rounds of the queue's retries left once the schedule is done
	lockWaits  int             // granted steps the server said wait on a lock
	releases   int             // the events that may have let go of a lock so far (races.go)
	races      []result.Race   // choices made by timing, not by the schedule (races.go)
	// releaseBySQL is what each statement text may do to its locks (releaseOf).
	releaseBySQL map[string]release
	// holder is the step whose commit is held (Schedule.Holds) once its
	// statement has run; watch is the step granted after it, whose end
	// or lock wait releases it (holds.go).
	holder, watch *stepRequest
	newWorker     func() (Handler, error) // Input.NewWorker

	ctx      context.Context     // the scenario's; for work started from events
	world    world               // the deliveries' connections and the server (world.go)
	failure  error               // an internal error raised while handling an event
	backends *wireproxy.Backends // the server connections deliveries that ended cleanly gave back
	cancels  cancelPolicy        // when a running delivery's context is cancelled; see cancel.go
	queue    *queueRun           // the job's Queue, when it has one; see queue_run.go
	settled  *deliveryRun        // the delivery whose panic settled the scenario; see settled.go
}

type deliveryRun struct {
	n    int // 1-based position in the schedule
	spec faults.Scheduled
	kind queue.DeliveryKind

	life        life      // where it is in its life (lifecycle.go); changed only by execution.move
	queued      any       // queue.Fetched.Job
	clockStart  time.Time // the harness clock when it started
	cancelSeq   int       // requested when it was cancelled (cancel.go)
	cancelledAt time.Time // wall time of the cancel
	settledAs   queue.Settlement
	dueWaits    int // times the clock moved to the job's due time (queue_run.go)

	startedAt time.Time
	deadline  time.Time
	ctx       context.Context    // the handler's context
	cancel    context.CancelFunc // ends it
	// over is closed when the delivery ends (stop): its later effect
	// calls are refused. A delivery the queue cancelled lives on, and so
	// do its calls that do not carry its context.
	over     chan struct{}
	overOnce sync.Once
	returned chan struct{} // closed when the handler's goroutine returns
	// handlerDone is set when the handler has returned: a statement or
	// effect call asked after it comes from a goroutine the handler left
	// behind, and is late's to record (late.go).
	handlerDone atomic.Bool
	late        lateWatch
	closeLate   bool // its connections close once its late goroutines end (awaitLate)
	proxy       *wireproxy.Proxy
	pool        *pgxpool.Pool
	sqlDB       *DeliverySQL // Delivery.SQL's, opened by the handler

	requested   int // steps asked for so far; numbers them
	pending     []*stepRequest
	inflight    map[*stepRequest]*inflightStep
	bySQL       map[int]*stepRequest // in-flight statements by proxy step index
	lostReply   *stepRequest         // the statement applied with its reply lost, until its After
	effectMu    sync.Mutex           // guards effectReq, set by the handler's goroutine
	effectReq   *stepRequest         // the granted effect call awaiting endEffect
	dieAfter    *stepRequest         // an effect the delivery dies right after
	outageKey   string               // KindEffectOutage: the key whose later calls lose their answers too
	midJobFault bool                 // a crash, ambiguous or effect fault hit it before its end
	durable     bool                 // it committed something or made an effect
	done        int                  // steps completed
	steps       []faults.Step        // completed steps, in completion order
	asked       []faults.Step        // granted steps, in the order it asked for them; see reduce.go
	taken       []*stepRequest       // granted steps, in order, with their fates; see fate.go

	outcome result.DeliveryOutcome
}

type inflightStep struct {
	req     *stepRequest
	blocked bool
	held    bool // its statement ran; its commit waits (holds.go)
	// by are the backends a blocked step waits for, as the server said
	// when execution.releases was byAt (races.go).
	by   []uint32
	byAt int
	// asks counts the times the server was asked whether it waits on a
	// lock; nextAsk is when to ask again (see stepPoll).
	asks    int
	nextAsk time.Time
}

// stepPoll is how long after a granted statement's asks-th question
// whether it waits on a lock (the first: after its grant) the next one
// comes: lockPoll, then doubling up to maxQueuePoll. A statement waits on
// a lock as soon as it reaches the locked row, so the first questions
// find most waits; one that is only slow, on a busy machine, costs a few
// questions rather than one every lockPoll, each on the loop that grants
// the next step.
func stepPoll(asks int) time.Duration {
	return min(lockPoll<<min(asks, 3), maxQueuePoll)
}

// stepRequest is a step waiting for its grant: a statement held by the
// delivery's proxy, or an effect call held by its fakes.
type stepRequest struct {
	d      *deliveryRun
	step   wireproxy.Step // for an effect: SQL holds the call as render.Step shows it
	call   faults.Step    // for an effect: the call
	effect bool
	reply  effects.Reply // for an effect: what the provider does with it; set before the grant
	seq    int           // the delivery's step number, statements and effects alike
	ran    bool          // a held statement that ran: counted when it did,
	stepAt int           // at this place of its delivery's steps
	grant  chan wireproxy.Action
	end    result.Fate // what became of it once granted; see fate.go
	waited bool        // it waited on a lock another delivery held
	// behind are the deliveries whose steps waited on d's locks alone when
	// this one was granted: no race unless it waits on a lock too
	// (grantedBeside).
	behind []*deliveryRun
}

// asStep is the step as a result records it.
func (r *stepRequest) asStep() faults.Step {
	if r.effect {
		return r.call
	}
	return faults.Step{SQL: r.step.SQL, CommitPoint: r.step.CommitPoint, Autocommit: r.step.CommitPoint && !r.step.InTransaction, Local: r.step.Local}
}

type eventKind int

const (
	evStep     eventKind = iota // a step asks to be granted
	evStepDone                  // a granted step's reply arrived, or an effect call returned
	evReturned                  // a handler returned
	evQueue                     // a queue operation returned
	evStepHeld                  // a held step's statement ran; its commit waits
	evGaveUp                    // a step's requester stopped waiting for its grant (races.go)
)

type event struct {
	kind eventKind
	d    *deliveryRun
	req  *stepRequest
	step wireproxy.Step
	err  error
	dur  time.Duration // evReturned: the handler's wall time
	call *queueCall    // evQueue: the operation, its answer in it
}

// eventQueue never blocks the sender: proxy hooks must not block.
type eventQueue struct {
	mu     sync.Mutex
	queue  []event
	signal chan struct{}
}

func (q *eventQueue) push(e event) {
	q.mu.Lock()
	q.queue = append(q.queue, e)
	q.mu.Unlock()
	q.poke()
}

// poke wakes the event loop without an event.
func (q *eventQueue) poke() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *eventQueue) drain() []event {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.queue
	q.queue = nil
	return out
}

// execute runs sched on db and returns what each delivery did and the
// steps every delivery completed.
//
// With retries, once every scheduled delivery has ended the queue does what
// a queue does: each job whose last delivery failed is delivered once more,
// cleanly, after the visibility timeout. The job must complete then.
func (r *Executor) execute(ctx context.Context, in Input) (*execution, error) {
	db, sched, retries := in.DB, in.Schedule, in.Retries
	e := &execution{
		r: r, sched: sched, db: db, clock: in.Clock, began: in.Clock.Now(), ctx: ctx, newWorker: in.NewWorker,
		events:  eventQueue{signal: make(chan struct{}, 1)},
		workers: map[int]Handler{},
		cancels: r.cancelPolicyOf(),
	}
	e.world = liveWorld{e}
	var queueConn *pgx.Conn
	e.backends, queueConn = r.backends.of(db.Name)
	if queueConn != nil {
		r.queueConns.put(ctx, db.Name, queueConn)
	}
	if retries {
		// The harness's own queue retries a failed job once; a queue
		// adapter's may need several rounds (a snooze, then a retry).
		e.retries = 1
		if r.job.Queue != nil {
			e.retries = maxQueueRounds
		}
	}
	for _, spec := range sched.Deliveries {
		e.add(spec)
	}
	defer e.forgetProgress() // stuck.go
	defer e.abandon()
	if r.job.Queue != nil {
		q, err := e.openQueue(ctx)
		if err != nil {
			return e, err
		}
		e.queue = q
		defer q.close(ctx)
	}
	return e, e.run(ctx)
}

// maxQueueRounds bounds the rounds of retries the queue makes once the
// schedule is done: with a queue adapter a job may need several (a
// snooze, then a retry after a failure).
const maxQueueRounds = 5

func (e *execution) run(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if err := e.startReady(ctx); err != nil {
			return err
		}
		if e.finished() {
			if e.retries > 0 {
				e.retries--
				if e.addQueueRetries() {
					continue
				}
			}
			e.awaitLate(ctx) // late.go
			return e.failure
		}
		if e.stalled() {
			e.killAll()
			return fmt.Errorf("scenario %s stalled: no delivery runs and none can start (a bug in twice; please report it with the schedule)", e.sched)
		}
		if e.queue != nil {
			e.queue.next(e) // once the steps it waits for have finished
		}
		e.grant()
		e.noteProgress() // stuck.go
		timer.Reset(e.wake())
		select {
		case <-e.events.signal:
		case <-timer.C:
			if err := e.checkStalls(ctx); err != nil {
				return err
			}
		case <-ctx.Done():
			e.killAll()
			return fmt.Errorf("scenario %s interrupted: %w", e.sched, ctx.Err())
		}
		if err := e.takeEvents(ctx); err != nil {
			return err
		}
		if e.failure != nil {
			// The check stops here: the deliveries still running die on
			// the server too, their backends terminated, before the
			// database is given back for a later scenario.
			e.dieLive("stopped with the check: "+text.FirstLine(e.failure.Error()), nil)
			e.killAll()
			return e.failure
		}
	}
}

// takeEvents handles the events that came since the loop last looked.
func (e *execution) takeEvents(ctx context.Context) error {
	for _, ev := range e.events.drain() {
		e.handle(ev)
		// A delivery that starts once another has done its steps
		// starts now, before a later event of the other (its
		// return, then its ack) is taken: the two often come in one
		// drain, and which of them the queue saw first would
		// otherwise depend on how soon the handler returned.
		if e.failure == nil {
			if err := e.startReady(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

func (e *execution) finished() bool {
	for _, d := range e.deliveries {
		if !d.life.over() {
			return false
		}
	}
	return true
}

// stalled reports whether the scenario can no longer move: not finished,
// yet no delivery runs or settles, and no queue operation runs or waits.
// It never holds unless the scheduler is wrong; waiting would hang.
func (e *execution) stalled() bool {
	if e.finished() {
		return false
	}
	for _, d := range e.deliveries {
		if d.life.live() {
			return false
		}
	}
	return e.queue == nil || (e.queue.running == nil && len(e.queue.waiting) == 0)
}

// overlapped reports whether any deliveries ran at once.
func (e *execution) overlapped() bool {
	for _, d := range e.deliveries {
		if d.spec.With > 0 {
			return true
		}
	}
	return false
}

// faulted is the set of deliveries a crash, an ambiguous fault or an
// effect fault hit in the middle of their run: after a lost answer the
// handler cannot know the effect happened, and after a refusal it may
// have recorded its intent already. A crash before the ack and a lost ack
// come after every record is durable, so they are not in it.
func (e *execution) faulted() map[string]bool {
	out := map[string]bool{}
	for _, d := range e.deliveries {
		if d.midJobFault {
			out[d.spec.Label()] = true
		}
	}
	return out
}

// addQueueRetries appends a clean redelivery, on a fresh worker, of every
// job whose last delivery failed, and reports whether it added any.
func (e *execution) addQueueRetries() bool {
	if e.queue != nil {
		return e.queue.addRetries(e)
	}
	added := false
	worker := 0
	for _, d := range e.deliveries {
		worker = max(worker, d.spec.Worker)
	}
	for _, last := range e.lastPerJob() {
		if !last.failed() {
			continue
		}
		worker++
		spec := faults.Scheduled{Job: last.spec.Job, Attempt: last.spec.Attempt + 1, Worker: worker, Advance: e.r.visibilityTimeout()}
		e.add(spec).outcome.QueueRetry = true
		added = true
	}
	return added
}

func (e *execution) add(spec faults.Scheduled) *deliveryRun {
	d := &deliveryRun{
		n: len(e.deliveries) + 1, spec: spec,
		inflight: map[*stepRequest]*inflightStep{}, bySQL: map[int]*stepRequest{},
		outcome: result.DeliveryOutcome{Delivery: spec, JobID: jobID(spec.Job), Attempt: spec.Attempt, Worker: spec.Worker},
	}
	e.deliveries = append(e.deliveries, d)
	return d
}

// completionRule is the queue's rule for which delivery of a job decides
// whether the job completed, when several overlap (a visibility timeout, a
// concurrent delivery): the one the queue handed out last. Its outcome
// counts, whatever the earlier ones returned and whichever finished first:
// if it succeeds the job is done even though an earlier delivery failed,
// and if it fails the queue retries the job even though an earlier one
// succeeded. That is SQS's rule (a delete must carry the latest receipt
// handle; an older one may leave the message in the queue). It lives here
// alone so that a queue with another rule can make it a property of its
// own. deliveries are one job's, in the order the queue handed them out.
func completionRule(deliveries []*deliveryRun) *deliveryRun {
	return deliveries[len(deliveries)-1]
}

// lastPerJob is, for each job in job order, the delivery whose outcome
// says whether the job completed (completionRule).
func (e *execution) lastPerJob() []*deliveryRun {
	byJob := map[int][]*deliveryRun{}
	var jobs []int
	for _, d := range e.deliveries {
		if byJob[d.spec.Job] == nil {
			jobs = append(jobs, d.spec.Job)
		}
		byJob[d.spec.Job] = append(byJob[d.spec.Job], d)
	}
	out := make([]*deliveryRun, len(jobs))
	for i, j := range jobs {
		out[i] = completionRule(byJob[j])
	}
	return out
}

func (d *deliveryRun) failed() bool { return d.life == dead || d.outcome.Err != "" }

// incomplete says, one line per job, why a job did not complete: its last
// delivery, the queue's retry included, failed.
func (e *execution) incomplete() []unfinished {
	if e.queue != nil {
		return e.queue.incomplete(e)
	}
	var out []unfinished
	for _, d := range e.lastPerJob() {
		if d.outcome.Err != "" {
			out = append(out, unfinished{d.outcome.JobID, fmt.Sprintf("its last delivery %s (attempt %d) returned an error: %s",
				d.spec.Label(), d.outcome.Attempt, text.FirstLine(d.outcome.Err))})
		} else if d.life == dead {
			out = append(out, unfinished{d.outcome.JobID, fmt.Sprintf("its last delivery %s (attempt %d) %s",
				d.spec.Label(), d.outcome.Attempt, d.outcome.Fault)})
		}
	}
	return out
}

// unfinished is why one job did not complete: job is its ID, why the
// reason, and Output.Incomplete shows it as "job <job>: <why>".
type unfinished struct {
	job, why string
}

// lines is us as Output.Incomplete shows them.
func lines(us []unfinished) []string {
	out := make([]string, 0, len(us))
	for _, u := range us {
		out = append(out, "job "+u.job+": "+u.why)
	}
	return out
}

// startReady starts every delivery whose start condition holds: the
// previous delivery ended, or the delivery it overlaps has done enough
// steps (or ended).
func (e *execution) startReady(ctx context.Context) error {
	for i, d := range e.deliveries {
		switch d.life {
		case waiting:
		case begun, held:
			// The queue is handing it out, or it waits for deliveries the
			// queue cancelled; later ones wait for it.
			return e.releaseHeld(ctx, d)
		default:
			continue
		}
		if !e.ready(i, d) {
			// Deliveries start in schedule order.
			return nil
		}
		e.move(d, onHandOut)
		e.clock.Advance(d.spec.Advance)
		d.kind = e.kindOf(d)
		if e.queue == nil {
			if e.cancelOverdue() {
				e.move(d, onHold)
				return nil
			}
			if err := e.start(ctx, d); err != nil {
				return err
			}
			continue
		}
		d.outcome.Kind = d.kind
		e.queue.begin(e, d)
		if !d.life.over() {
			return nil
		}
	}
	return nil
}

// ready reports whether d, the i-th delivery, may be handed out: the
// one before it has ended, or the one it overlaps has done enough steps
// (or ended: a delivery the queue never made has ended without
// starting).
func (e *execution) ready(i int, d *deliveryRun) bool {
	if w := d.spec.With; w > 0 {
		ref := e.deliveries[w-1]
		return ref.life.over() || (ref.life.started() && ref.done >= d.spec.After)
	}
	return i == 0 || e.deliveries[i-1].life.over()
}

// releaseHeld starts (or, with a queue, fetches) d, held for deliveries
// the queue cancelled, once they have reacted.
func (e *execution) releaseHeld(ctx context.Context, d *deliveryRun) error {
	if d.life != held || !e.cancelSettled() {
		return nil
	}
	e.move(d, onRelease)
	if e.queue == nil {
		return e.start(ctx, d)
	}
	e.queue.fetch(e, d)
	return nil
}

// kindOf says why the queue hands d's job out.
func (e *execution) kindOf(d *deliveryRun) queue.DeliveryKind {
	if d.outcome.QueueRetry {
		return queue.DeliveryRetry
	}
	var prev *deliveryRun
	for _, o := range e.deliveries[:d.n-1] {
		if o.spec.Job == d.spec.Job {
			prev = o
		}
	}
	switch {
	case prev == nil && d.spec.Job == 1:
		return queue.DeliveryFirst
	case prev == nil:
		return queue.DeliveryProducerCopy
	case d.spec.Advance > e.r.visibilityTimeout():
		// Past the point where the queue would have handed the job out
		// itself: nobody but a person brings it back now.
		return queue.DeliveryRedrive
	case prev.spec.Fault == faults.KindLostAck:
		return queue.DeliveryLostAckRedelivery
	}
	return queue.DeliveryRedelivery
}

func (e *execution) start(ctx context.Context, d *deliveryRun) error {
	e.move(d, onStart)
	d.clockStart = e.clock.Now()
	h, ok := e.workers[d.spec.Worker]
	if !ok {
		var err error
		if h, err = e.newWorker(); err != nil {
			d.outcome.Err = err.Error()
			e.move(d, onFinish)
			return nil
		}
		e.workers[d.spec.Worker] = h
	}
	// Loopback TCP, not a unix socket, so Delivery.DSN works with every
	// driver: bun's pgdriver dials a host=/dir socket directory as if it
	// were the socket; postgres://user@127.0.0.1:port/db all read alike.
	p, err := wireproxy.Listen(wireproxy.Config{
		Label:      d.spec.Label(),
		Upstream:   e.db.ConnString,
		UnixSocket: false,
		Backends:   e.backends,
		Hooks: wireproxy.Hooks{
			Before: func(ctx context.Context, s wireproxy.Step) wireproxy.Action {
				if d.handlerDone.Load() {
					return d.late.ask(s.SQL) // late.go
				}
				req := &stepRequest{d: d, step: s, grant: make(chan wireproxy.Action, 1)}
				e.events.push(event{kind: evStep, d: d, req: req})
				select {
				case a := <-req.grant:
					return a
				case <-ctx.Done():
					e.events.push(event{kind: evGaveUp, d: d, req: req})
					return wireproxy.Crash
				}
			},
			After: func(s wireproxy.Step, err error) {
				e.events.push(event{kind: evStepDone, d: d, step: s, err: err})
			},
			Held: func(s wireproxy.Step) {
				e.events.push(event{kind: evStepHeld, d: d, step: s})
			},
		},
	})
	if err != nil {
		return err
	}
	d.proxy = p
	cfg, err := pgxpool.ParseConfig(p.DSN())
	if err != nil {
		return fmt.Errorf("pool for delivery %s: %w", d.spec.Label(), err)
	}
	wireproxy.MarkPool(&cfg.ConnConfig.Config) // tells its connections from the handler's own on the DSN
	// The delivery's own pools reach the proxy in the process, without
	// the loopback hop the DSN's connections pay (wireproxy.Proxy.Dial).
	cfg.ConnConfig.DialFunc = func(ctx context.Context, _, _ string) (net.Conn, error) { return p.Dial(ctx) }
	d.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("pool for delivery %s: %w", d.spec.Label(), err)
	}
	d.sqlDB = newDeliverySQL(d.spec.Label(), cfg.ConnConfig.Copy())
	d.startedAt = time.Now()
	d.deadline = d.startedAt.Add(e.r.cfg.DeliveryTimeout)
	d.ctx, d.cancel = context.WithCancel(ctx)
	d.over = make(chan struct{})
	d.returned = make(chan struct{})
	hctx := d.ctx
	env := Env{Spec: d.spec, JobID: d.outcome.JobID, Attempt: d.outcome.Attempt, Kind: d.kind, Queued: d.queued, DB: d.pool, DSN: p.DSN(), SQL: d.sqlDB,
		Effects: effectStepper{e: e, d: d}}
	go func() {
		defer close(d.returned)
		start, gid := time.Now(), goid.ID()
		err, returned := errGoexit, false
		defer func() { // also when the handler calls runtime.Goexit (goexit.go)
			d.handlerDone.Store(true)
			d.late.left(leftBy(gid), time.Now()) // late.go
			if !returned {
				err = errGoexit
			}
			if err == nil {
				// A handler that says it did its work: what it left in
				// a transaction is read now, before its context is
				// cancelled (dead.go).
				d.proxy.HandlerReturned()
			}
			e.events.push(event{kind: evReturned, d: d, err: err, dur: time.Since(start)})
		}()
		err = callHandler(hctx, h, env)
		returned = true
	}()
	return nil
}

// callHandler runs h, turning a panic into an error with the stack.
func callHandler(ctx context.Context, h Handler, env Env) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &panicked{value: fmt.Sprint(p), stack: fromPanic(string(debug.Stack()))}
		}
	}()
	return h(ctx, env)
}

// handle takes one event from the delivery's proxy, its effect fakes,
// its handler's goroutine or the queue.
func (e *execution) handle(ev event) {
	d := ev.d
	switch ev.kind {
	case evStep:
		e.asked(d, ev.req)
	case evStepDone:
		e.stepDone(d, ev)
	case evReturned:
		e.returned(d, ev)
	case evQueue:
		e.releases++ // the queue's operation may have let go of a lock
		e.queue.done(e, ev)
	case evStepHeld:
		if !d.life.over() {
			e.held(d, ev.step)
		}
	case evGaveUp:
		e.gaveUp(d, ev.req) // races.go
	}
}

// asked queues req, which d's handler asks to make, for its grant; an
// ended delivery's are refused.
func (e *execution) asked(d *deliveryRun, req *stepRequest) {
	if d.life.over() {
		req.grant <- wireproxy.Crash
		return
	}
	d.requested++
	req.seq = d.requested
	d.pending = append(d.pending, req)
	e.cancelIfWaiting(d)
}

// stepDone counts the granted step whose reply arrived (a statement) or
// that returned (an effect call) as one d completed.
func (e *execution) stepDone(d *deliveryRun, ev event) {
	if d.life.over() {
		return // a dead delivery's late replies are not its steps
	}
	req := ev.req
	if req == nil {
		req = d.bySQL[ev.step.Index]
		delete(d.bySQL, ev.step.Index)
	}
	if req == nil {
		return
	}
	// The server's answer makes a read-looking statement that wrote
	// a commit point.
	req.step.CommitPoint = req.step.CommitPoint || ev.step.CommitPoint
	if may, _ := e.releaseOf(req); may {
		e.releases++ // races.go
	}
	if req == d.lostReply {
		// Applied, its reply lost: no step the handler completed,
		// but durable when it wrote.
		d.lostReply = nil
		d.durable = d.durable || req.step.CommitPoint
		e.watchEnded(req)
		return
	}
	e.watchEnded(req)
	delete(d.inflight, req)
	req.finished()
	if req.ran {
		d.steps[req.stepAt] = req.asStep() // counted when it ran
	} else {
		d.done++
		d.steps = append(d.steps, req.asStep())
	}
	d.durable = d.durable || (req.effect && req.reply != effects.Refused) || req.step.CommitPoint
	if req == d.dieAfter && !d.life.over() {
		e.die(d, fmt.Sprintf("crashed right after step %d: %s", req.seq, text.OneLine(req.step.SQL)))
	}
}

// returned takes d's handler's return: the worker dies before the ack
// (a crash after the last step), the ack is lost, the queue acks or
// nacks it, or, with no queue, the delivery ends. A dead delivery's
// return value is ignored.
func (e *execution) returned(d *deliveryRun, ev event) {
	if d.life.over() {
		return // it died before; its return value is ignored
	}
	if e.queue != nil {
		e.returnedBeside(d) // races.go
	}
	d.outcome.Duration = ev.dur
	if errors.Is(ev.err, errGoexit) {
		e.goexit(d)
		return
	}
	if ev.err != nil {
		d.outcome.Err = ev.err.Error()
	}
	switch {
	case d.spec.Fault == faults.KindCrash && d.spec.At == 0:
		e.die(d, "crashed after its last step, before the ack")
		return
	case d.spec.Fault == faults.KindLostAck && ev.err == nil:
		d.outcome.Fault, d.outcome.AckLost = "returned nil, but its ack was lost", true
		e.end(d)
		return
	}
	if p := (*panicked)(nil); errors.As(ev.err, &p) {
		d.outcome.Panic = &result.Panic{Value: p.value, Stack: p.stack}
	}
	if errors.Is(ev.err, errPanicked) {
		e.settle(d) // settled.go
	}
	if e.queue != nil {
		// A handler returns with its statement held only when it gave
		// up waiting (its context was cancelled): the hold is dropped
		// as at its end, or the next step's end would let through a
		// commit whose reply nobody reads.
		e.dropHolds(d)
		e.stop(d)
		e.queue.settle(e, d, ev.err)
		return
	}
	e.end(d)
}

// end closes d's connections and refuses its waiting steps: a connection
// kept past the handler's return must not outlive the delivery.
func (e *execution) end(d *deliveryRun) {
	e.move(d, onFinish)
	e.dropHolds(d)
	e.stop(d)
}

// move takes d to the life ev leads to; a move that is not one is a bug
// in the executor, which stops the check as twice's own breakage.
func (e *execution) move(d *deliveryRun, ev lifeEvent) {
	to, err := d.life.next(ev)
	if err != nil {
		if e.failure == nil {
			e.failure = fmt.Errorf("delivery %s of schedule %s: %w (a bug in twice; please report it with the schedule)", d.spec.Label(), e.sched, err)
		}
		return
	}
	d.life = to
	e.releases++ // a delivery that ends lets go of its locks
}

// stop cancels d's context, ends its connections and refuses its waiting
// steps; with a queue, Ack or Nack follow before it ends. A dead worker's
// connections are cut, so the server rolls back what they had open and
// releases their locks, as at a crash; a delivery that returned gives the
// backends of its idle connections back for the next delivery.
func (e *execution) stop(d *deliveryRun) {
	d.cancel()
	d.overOnce.Do(func() { close(d.over) })
	switch {
	case d.life == dead:
		d.closeLate = false
		d.late.close() // a dead worker's goroutines do nothing
	case d.closeLate || d.late.running():
		// Its handler left goroutines running: its connections stay
		// watched until they end (awaitLate, late.go).
		d.closeLate = true
	default:
		d.late.close()
	}
	if !d.closeLate && e.world.close(d) {
		// Once its connections are over on the server, a delivery has
		// no step in flight: a dead one's statement ended with its
		// backend, and so did the one a cancelled handler stopped
		// waiting for, whose busy connection Release cut. A step it had
		// out no longer keeps the scheduler from granting the next
		// delivery's, or the queue from acking the next one (its late
		// reply, if any, is ignored once the delivery is over).
		for req := range d.inflight {
			e.watchEnded(req)
			delete(d.inflight, req)
		}
	}
	for _, p := range d.pending {
		p.grant <- wireproxy.Crash
	}
	d.pending = nil
	// Its end may let the next delivery start: look again now, not when
	// an event comes, which a dead delivery's goroutine may never send.
	e.events.poke()
}

// die kills d as a crash does: sockets cut, later steps refused, return
// value ignored, worker discarded.
func (e *execution) die(d *deliveryRun, why string) {
	e.move(d, onDie)
	d.outcome.Fault = why
	d.outcome.Err = ""
	d.outcome.Duration = time.Since(d.startedAt)
	delete(e.workers, d.spec.Worker)
	e.dropHolds(d)
	e.stop(d)
}

// grant lets one waiting step through when no granted step is running
// (one that waits on a lock does not count): the one the schedule's order
// names next, or, past the order, the earliest delivery's.
func (e *execution) grant() {
	if (e.queue != nil && e.queue.holds()) || e.holdsForCancel() {
		return // a queue operation runs, or cancelled deliveries react
	}
	if e.stepRunning() || e.waitEnded() { // races.go
		return
	}
	if e.holder != nil && e.watch == nil && !e.anotherCanStep(e.holder.d) {
		e.releaseHold() // nothing can run beside it
		return
	}
	for e.pos < len(e.sched.Order) {
		d := e.deliveries[e.sched.Order[e.pos]-1]
		switch {
		case d.life.over():
			e.pos++
			continue
		case len(d.pending) > 0:
			e.pos++
			e.give(d, e.sched.Held(e.pos))
			return
		case !d.life.started() || d.blocked():
			// It cannot take its turn yet: let another delivery move
			// without using up the turn.
			e.giveEarliest(d)
			return
		}
		return // it runs its own code; wait for its next step
	}
	e.giveEarliest(nil)
}

// stepRunning reports whether a granted step of any delivery is running:
// not finished, not waiting on a lock, not held (holds.go).
func (e *execution) stepRunning() bool {
	for _, d := range e.deliveries {
		for _, f := range d.inflight {
			if !f.blocked && !f.held {
				return true
			}
		}
	}
	return false
}

// stepOut reports whether a granted step of any delivery has not
// finished, running or waiting on a lock, and is not held.
func (e *execution) stepOut() bool {
	for _, d := range e.deliveries {
		for _, f := range d.inflight {
			if !f.held {
				return true
			}
		}
	}
	return false
}

func (d *deliveryRun) blocked() bool {
	for _, f := range d.inflight {
		if f.blocked || f.held {
			return true
		}
	}
	return false
}

// giveEarliest grants the next step of the earliest delivery (but except)
// that can run: started, not ended, not waiting on a lock. If that one has
// not asked for its next step yet, it waits for it rather than let a later
// delivery go first: which request arrives first is timing, and the
// interleaving must not depend on it. Only when every running delivery
// waits on a lock does a waiting one's other connection get a turn.
func (e *execution) giveEarliest(except *deliveryRun) {
	for _, d := range e.deliveries {
		if d == except || !d.life.live() || d.blocked() {
			continue
		}
		if len(d.pending) > 0 {
			e.give(d, false)
		}
		return
	}
	for _, d := range e.deliveries {
		if d != except && len(d.pending) > 0 {
			e.give(d, false)
			return
		}
	}
}

// give grants d's oldest waiting step, or turns it into the delivery's
// fault when the schedule puts one there; hold holds its commit
// (Schedule.Holds).
func (e *execution) give(d *deliveryRun, hold bool) {
	req := d.pending[0]
	d.pending = d.pending[1:]
	e.granted = append(e.granted, d.n)
	d.asked = append(d.asked, req.asStep())
	d.taken = append(d.taken, req)
	if e.holder != nil && e.watch == nil && d != e.holder.d {
		e.watch = req
	}
	if e.atFault(d, req) {
		return
	}
	e.grantedBeside(d, req) // races.go
	if d.outageKey != "" && req.effect && req.seq > d.spec.At && req.call.Key == d.outageKey {
		// A retry of the outage's call with its key: its answer is lost too.
		req.reply, req.end = effects.ReplyLost, result.TimedOut
	}
	d.inflight[req] = &inflightStep{req: req, nextAsk: time.Now().Add(stepPoll(0))}
	if !req.effect {
		d.bySQL[req.step.Index] = req
	}
	if hold && e.canHold(d, req) {
		req.grant <- wireproxy.Hold
		return
	}
	req.grant <- wireproxy.Forward
}

// effectStepper makes a delivery's effect calls steps of the schedule.
type effectStepper struct {
	e *execution
	d *deliveryRun
}

func (s effectStepper) Begin(ctx context.Context, call faults.Step) (effects.Reply, error) {
	if s.d.handlerDone.Load() { // a goroutine the handler left behind (late.go)
		if s.d.late.ask(render.Step(call)) != wireproxy.Forward {
			return 0, fmt.Errorf("%w: %s is over; the effect was not made", wireproxy.ErrDead, s.d.spec.Label())
		}
		return effects.Answered, nil
	}
	req := &stepRequest{d: s.d, step: wireproxy.Step{SQL: render.Step(call)}, call: call, effect: true, grant: make(chan wireproxy.Action, 1)}
	s.e.events.push(event{kind: evStep, d: s.d, req: req})
	select {
	case a := <-req.grant:
		if a != wireproxy.Forward {
			return 0, fmt.Errorf("%w: %s is dead; the effect was not made", wireproxy.ErrDead, s.d.spec.Label())
		}
		s.d.effectMu.Lock()
		s.d.effectReq = req
		s.d.effectMu.Unlock()
		return req.reply, nil // set by give before the grant was sent
	case <-ctx.Done():
		s.e.events.push(event{kind: evGaveUp, d: s.d, req: req})
		return 0, ctx.Err()
	case <-s.d.over:
		// The delivery ended and the handler kept going, on a context of
		// its own: nothing it does now happens. A delivery the queue only
		// cancelled has not ended: a call that does not carry its context
		// is made, as in production.
		return 0, fmt.Errorf("%w: %s is dead; the effect was not made", wireproxy.ErrDead, s.d.spec.Label())
	}
}

func (s effectStepper) End(faults.Step) {
	s.d.effectMu.Lock()
	req := s.d.effectReq
	s.d.effectReq = nil
	s.d.effectMu.Unlock()
	if req == nil {
		return // a late call's (late.go)
	}
	s.e.events.push(event{kind: evStepDone, d: s.d, req: req})
}

// checkStalls ends deliveries past their deadline and asks the server
// whether running steps wait on a lock.
func (e *execution) checkStalls(ctx context.Context) error {
	now := time.Now()
	if e.queue != nil {
		if err := e.queue.checkStall(ctx, e); err != nil {
			return err
		}
	}
	if err := e.checkLostReplies(ctx); err != nil { // holds.go
		return err
	}
	for _, d := range e.deliveries {
		if !d.life.acting() {
			continue
		}
		if now.After(d.deadline) {
			// A hung handler: the delivery fails, and its worker, stuck
			// in it, is as good as dead.
			msg := fmt.Sprintf("handler did not return within %v (Config.DeliveryTimeout); %s", e.r.cfg.DeliveryTimeout, d.where())
			e.raced(result.TimerFired, d, nil, 0) // races.go
			e.die(d, "")
			d.outcome.Err = msg
			e.checkDeaf(d, msg) // goexit.go
			continue
		}
		if !e.lockWaitMatters(d) {
			continue
		}
		for _, f := range d.inflight {
			if err := e.askWaits(ctx, f, now); err != nil {
				return err
			}
		}
	}
	return nil
}

// askWaits asks the server whether f, a granted statement that runs,
// waits on a lock, when its time to be asked has come (stepPoll).
func (e *execution) askWaits(ctx context.Context, f *inflightStep, now time.Time) error {
	if f.blocked || f.held || f.req.effect || now.Before(f.nextAsk) {
		return nil // a fake never waits on a database lock
	}
	f.asks++
	f.nextAsk = now.Add(stepPoll(f.asks))
	by, err := e.world.blockedBy(ctx, f.req.step.PID)
	if err != nil || len(by) == 0 {
		return err
	}
	if !f.req.waited {
		e.lockWaits++ // once a step, though it may wait again (waitEnded)
	}
	f.blocked, f.req.waited = true, true
	f.by, f.byAt = by, e.releases
	e.noteWait(f.req) // races.go
	e.watchEnded(f.req)
	return nil
}

// lockWaitMatters reports whether it matters now that a running step of
// d waits on a lock: when a step waits to be granted (the running one
// holds it back unless it waits), another delivery runs beside d (the
// two may wait on each other, and a hold waits for the other's step),
// or d is overdue for its cancellation (cancelled once it waits). A lone
// delivery with nothing waiting behind it is not asked about, which
// spares a question to the server every lockPoll of each of its slower
// statements, on the loop that grants its next one: whatever it waits
// for, nothing the executor could grant would release it, and when
// something asks for a grant the question is asked then.
func (e *execution) lockWaitMatters(d *deliveryRun) bool {
	if e.holder != nil || d.life == overdue {
		return true
	}
	for _, o := range e.deliveries {
		if len(o.pending) > 0 || (o != d && o.life.live()) {
			return true
		}
	}
	return false
}

// wake is when the loop must look again without an event: soon while a
// granted step runs (it may wait on a lock), else at the next deadline.
func (e *execution) wake() time.Duration {
	next := time.Hour
	if e.queue != nil {
		if w, ok := e.queue.wake(e); ok {
			next = w
		}
	}
	if w, ok := e.cancelWake(); ok && w < next {
		next = w
	}
	if len(e.lostRepliesBesideHold()) > 0 {
		return lockPoll // checkLostReplies
	}
	for _, d := range e.deliveries {
		if !d.life.acting() {
			continue
		}
		for _, f := range d.inflight {
			if !f.blocked && !f.held && !f.req.effect && e.lockWaitMatters(d) {
				next = min(next, time.Until(f.nextAsk))
			}
		}
		if until := time.Until(d.deadline); until < next {
			next = until
		}
	}
	return max(next, time.Millisecond)
}

func (e *execution) killAll() {
	for _, d := range e.deliveries {
		if d.proxy != nil {
			d.proxy.Kill()
		}
	}
}

// abandon ends what is left of the scenario's deliveries: their contexts
// are cancelled and their connections cut and refused. It waits at most
// abandonGrace for handler goroutines to return, and hands the ones still
// running to the runner, which reports them once; nothing they do from now
// on is recorded.
func (e *execution) abandon() {
	e.closeProxies()
	grace := time.NewTimer(abandonGrace)
	defer grace.Stop()
	expired := false
	for _, d := range e.deliveries {
		if d.returned == nil {
			continue
		}
		if !expired {
			select {
			case <-d.returned:
				continue
			case <-grace.C:
				expired = true
			}
		}
		select {
		case <-d.returned:
		default:
			e.r.linger(fmt.Sprintf("%s in %s (schedule %s)", d.spec.Label(), cmp.Or(e.sched.Fault, "the clean run"), e.sched), d.returned)
		}
	}
}

// closeProxies ends every delivery's connections. A handler goroutine that
// outlives its delivery finds them refused.
func (e *execution) closeProxies() {
	for _, d := range e.deliveries {
		if d.cancel != nil {
			d.cancel()
		}
		if d.proxy != nil {
			d.proxy.Kill()
			// Close waits for the proxy's goroutines, which never wait on
			// the handler; the pool may wait on a leaked connection, so it
			// closes in the background.
			_ = d.proxy.Close()
		}
		if d.pool != nil {
			go d.pool.Close()
		}
		d.sqlDB.close()
	}
}

// where says which step a hung handler was at: one granted and not yet
// answered, or, when none is, the gap after the last finished step, where
// the handler runs its own code. Naming the next step there would blame a
// statement that never reached the server.
func (d *deliveryRun) where() string {
	var at *stepRequest
	for req := range d.inflight {
		if at == nil || req.seq < at.seq {
			at = req
		}
	}
	switch {
	case at != nil && at.effect:
		return fmt.Sprintf("it was at step %d, an effect call that had not returned: %s", at.seq, text.OneLine(at.step.SQL))
	case at != nil:
		return fmt.Sprintf("it was at step %d, which reached the server and had not finished: %s", at.seq, text.OneLine(at.step.SQL))
	case d.lostReply != nil:
		return fmt.Sprintf("it was waiting for the server to finish step %d, whose reply is lost: %s", d.lostReply.seq, text.OneLine(d.lostReply.step.SQL))
	case d.done == 0:
		return "it was in its own code before its first step reached the server"
	default:
		return fmt.Sprintf("it was in its own code after step %d finished (%s), before step %d reached the server",
			d.done, text.OneLine(d.steps[len(d.steps)-1].SQL), d.done+1)
	}
}
