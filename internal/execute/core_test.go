package execute

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/wireproxy"
)

// The executor's core run from scripted events, with no server: what a
// delivery's proxy would report (a statement asks for its grant, its
// reply came, its commit is held) and what the server would answer about
// locks are played by the test, in an order a machine may take, and the
// test asserts what the core grants, holds, commits and kills. Each case
// is an interleaving that once hung or misjudged a scenario.

// scriptedWorld answers for the world outside the core: which backends
// wait on a lock, and what the core asked of the deliveries'
// connections.
type scriptedWorld struct {
	waiting map[uint32][]uint32 // backends that wait on a lock: the backends they wait for
	serves  map[uint32]int      // backend: the delivery it serves
	commits []int               // deliveries whose held commit was let through
	closed  []string            // "1 dead": a delivery's connections ended, and its life then
}

func (w *scriptedWorld) close(d *deliveryRun) bool {
	w.closed = append(w.closed, fmt.Sprintf("%d %s", d.n, d.life))
	return true
}

func (w *scriptedWorld) commit(d *deliveryRun) { w.commits = append(w.commits, d.n) }

func (w *scriptedWorld) blockedBy(_ context.Context, pid uint32) ([]uint32, error) {
	return w.waiting[pid], nil
}

func (w *scriptedWorld) owns(d *deliveryRun, pid uint32) bool { return w.serves[pid] == d.n }

type script struct {
	t *testing.T
	e *execution
	w *scriptedWorld
}

func newScript(t *testing.T, sched string) *script {
	t.Helper()
	s, err := faults.Parse(sched)
	require.NoError(t, err)
	w := &scriptedWorld{waiting: map[uint32][]uint32{}, serves: map[uint32]int{}}
	e := &execution{r: &Executor{cfg: Settings{DeliveryTimeout: time.Hour}}, sched: s, ctx: t.Context(), world: w,
		events: eventQueue{signal: make(chan struct{}, 1)}, workers: map[int]Handler{}}
	for _, spec := range s.Deliveries {
		e.add(spec)
	}
	return &script{t: t, e: e, w: w}
}

// start starts delivery n as the executor would, with no handler behind
// it: the script asks for its steps.
func (s *script) start(n int) {
	d := s.e.deliveries[n-1]
	s.e.move(d, onHandOut)
	s.e.move(d, onStart)
	d.cancel = func() {}
	d.over = make(chan struct{})
	d.deadline = time.Now().Add(time.Hour)
	require.NoError(s.t, s.e.failure)
}

// ask is delivery n's handler sending a statement on backend pid.
func (s *script) ask(n int, sql string, pid uint32) *stepRequest {
	d := s.e.deliveries[n-1]
	s.w.serves[pid] = n
	req := &stepRequest{d: d, step: wireproxy.Step{SQL: sql, Index: d.requested + 1, PID: pid}, grant: make(chan wireproxy.Action, 1)}
	s.e.handle(event{kind: evStep, d: d, req: req})
	return req
}

// grant is one turn of the loop's granting.
func (s *script) grant() { s.e.grant() }

// replied is the server's reply to req reaching its delivery's proxy.
func (s *script) replied(req *stepRequest) {
	s.e.handle(event{kind: evStepDone, d: req.d, step: req.step})
}

// held is req's statement having run with its commit held.
func (s *script) held(req *stepRequest) {
	s.e.handle(event{kind: evStepHeld, d: req.d, step: req.step})
}

// poll is the loop's timer: the server is asked about every granted
// statement now, whenever it was last asked.
func (s *script) poll() {
	for _, d := range s.e.deliveries {
		for _, f := range d.inflight {
			f.nextAsk = time.Time{}
		}
	}
	require.NoError(s.t, s.e.checkStalls(s.t.Context()))
}

// answer is what req's grant was, or "waiting" when it has none yet.
func answer(req *stepRequest) string {
	select {
	case a := <-req.grant:
		req.grant <- a // a later look sees it too
		return actionName[a]
	default:
		return "waiting"
	}
}

var actionName = map[wireproxy.Action]string{wireproxy.Forward: "forward", wireproxy.Crash: "crash",
	wireproxy.Ambiguous: "ambiguous", wireproxy.Hold: "hold"}

// TestCoreLostReplyReachesTheHeldLockLate is the stall of 5111177: a
// statement whose reply is lost (an ambiguous fault) is granted first; the
// other delivery's statement, granted next with its commit held, takes
// the row lock first; the lost-reply statement then waits on the held
// transaction. Its delivery waits for a reply that cannot come and asks
// for no step the hold could wait for, so the hold must be let go once
// the server says the lost-reply statement waits, not before.
func TestCoreLostReplyReachesTheHeldLockLate(t *testing.T) {
	s := newScript(t, "j1a1w1!ambiguous:1 > j1a2w2@1:0 order 1,2~")
	s.start(1)
	s.start(2)
	lost := s.ask(1, "UPDATE t SET n = n + 1 WHERE id = 1", 101)
	other := s.ask(2, "UPDATE t SET n = n + 1 WHERE id = 1", 102)

	s.grant()
	assert.Equal(t, "ambiguous", answer(lost))
	s.grant()
	assert.Equal(t, "hold", answer(other))
	s.held(other)

	s.poll() // the lost-reply statement has not reached the lock yet
	s.grant()
	assert.Empty(t, s.w.commits, "the hold is let go while the other delivery may still ask for a step")

	s.w.waiting[101] = []uint32{102}
	s.poll()
	s.grant()
	assert.Equal(t, []int{2}, s.w.commits, "the held commit is let through once the lost reply waits on its lock")
	require.NoError(t, s.e.failure)
}

// TestCoreWatchedLostReplyReleasesTheHold: the step granted after a held
// one, whose end or lock wait lets the hold go, is a statement whose
// reply is lost. It never ends for the executor, so its lock wait alone
// must let the hold go.
func TestCoreWatchedLostReplyReleasesTheHold(t *testing.T) {
	s := newScript(t, "j1a1w1 > j1a2w2@1:0!ambiguous:1 order 1~,2")
	s.start(1)
	s.start(2)
	first := s.ask(1, "INSERT INTO t VALUES (1)", 101)
	s.grant()
	assert.Equal(t, "hold", answer(first))
	s.held(first)

	lost := s.ask(2, "INSERT INTO t VALUES (1)", 102)
	s.grant()
	assert.Equal(t, "ambiguous", answer(lost))
	assert.Same(t, lost, s.e.watch, "the lost-reply statement is the step the hold waits for")
	assert.Empty(t, s.w.commits)

	s.w.waiting[102] = []uint32{101}
	s.poll()
	assert.Equal(t, []int{1}, s.w.commits)
	assert.Nil(t, s.e.holder)
}

// TestCoreLockWaitDoesNotBlockTheScheduler: a granted statement that waits
// on a lock another delivery holds must not keep that delivery's next
// step from its grant (PostgreSQL's isolation tester's rule), and the
// wait is counted.
func TestCoreLockWaitDoesNotBlockTheScheduler(t *testing.T) {
	s := newScript(t, "j1a1w1 > j1a2w2@1:0 order 2,1,2")
	s.start(1)
	s.start(2)
	lock := s.ask(2, "SELECT * FROM t WHERE id = 1 FOR UPDATE", 102)
	s.grant()
	assert.Equal(t, "forward", answer(lock))
	s.replied(lock)

	blocked := s.ask(1, "UPDATE t SET n = 2 WHERE id = 1", 101)
	s.grant()
	assert.Equal(t, "forward", answer(blocked))
	commit := s.ask(2, "COMMIT", 102)
	s.grant()
	assert.Equal(t, "waiting", answer(commit), "granted while another step runs and is not known to wait")

	s.w.waiting[101] = []uint32{102}
	s.poll()
	s.grant()
	assert.Equal(t, "forward", answer(commit), "granted once the server says the running step waits on a lock")
	assert.Equal(t, 1, s.e.lockWaits)
	assert.Equal(t, []int{2, 1, 2}, s.e.granted)
}

// TestCoreStepBesideALockWaitIsARace: a statement granted while another
// delivery's statement waits on a lock that a session other than the
// granted delivery's holds is a race the executor does not decide: that
// session may let the lock go at any time, and the statement behind it
// then runs beside the granted one. The execution says so, so the
// schedule runs again whichever way it went; steps granted one at a
// time, with nothing beside them, are no race.
func TestCoreStepBesideALockWaitIsARace(t *testing.T) {
	s, _ := waitBehind(t, 103) // a session of neither delivery
	assert.Empty(t, s.e.races, "two steps granted one after the other, each alone, decide nothing by timing")

	next := s.ask(2, "UPDATE t SET n = 3 WHERE id = 2", 102)
	s.grant()
	assert.Equal(t, "forward", answer(next))
	assert.Equal(t, []result.Race{{Kind: result.StepBeside, Delivery: 2, Other: 1, Step: 2}}, s.e.races)
}

// waitBehind: delivery 2 locks a row; delivery 1's statement, granted
// next, waits on the backends by; the server has said so.
func waitBehind(t *testing.T, by ...uint32) (*script, *stepRequest) {
	s := newScript(t, "j1a1w1 > j1a2w2@1:0 order 2,1,2,2,2")
	s.start(1)
	s.start(2)
	lock := s.ask(2, "SELECT * FROM t WHERE id = 1 FOR UPDATE", 102)
	s.grant()
	s.replied(lock)
	blocked := s.ask(1, "UPDATE t SET n = 2 WHERE id = 1", 101)
	s.grant()
	require.Equal(t, "forward", answer(blocked))
	s.w.waiting[101] = by
	s.poll()
	return s, blocked
}

// TestCoreStepBehindItsOwnLockIsNoRace: a statement granted while the
// other delivery's waits on a lock only the granted delivery holds
// cannot let that one go on first. It lets go of the lock, if at all,
// as its last act (a COMMIT), and the waiting statement is then seen
// running before the next grant, which waits for it. So the grant is a
// race only when the granted step may let go of the lock and go on
// (CALL, DO, an unlock in a query), comes to wait on a lock itself (the
// server's deadlock check, a timer, picks which fails), or the waiting
// statement waits on another session too, or on a connection the
// delivery no longer has. Issue 38's confirmation runs a raced schedule
// again, so a grant taken for a race when it is none costs a whole run.
func TestCoreStepBehindItsOwnLockIsNoRace(t *testing.T) {
	step := result.Race{Kind: result.StepBeside, Delivery: 2, Other: 1, Step: 2}

	t.Run("its statements and its commit", func(t *testing.T) {
		s, blocked := waitBehind(t, 102)
		next := s.ask(2, "UPDATE t SET n = 3 WHERE id = 2", 102)
		s.grant()
		assert.Equal(t, "forward", answer(next))
		s.replied(next)
		commit := s.ask(2, "COMMIT", 102)
		s.grant()
		assert.Equal(t, "forward", answer(commit))
		assert.Empty(t, s.e.races, "the waiting statement waits on delivery 2's lock until its COMMIT is done")

		delete(s.w.waiting, 101) // the COMMIT gave the lock to the waiting statement
		s.replied(commit)
		last := s.ask(2, "SELECT 1", 102)
		s.grant()
		assert.Equal(t, "waiting", answer(last), "the statement that waited runs again: nothing is granted beside it")
		s.replied(blocked)
		s.grant()
		assert.Equal(t, "forward", answer(last))
		assert.Empty(t, s.e.races)
	})
	t.Run("a statement that waits again", func(t *testing.T) {
		s, _ := waitBehind(t, 102)
		commit := s.ask(2, "COMMIT", 102)
		s.grant()
		delete(s.w.waiting, 101)
		s.replied(commit)
		last := s.ask(2, "SELECT 1", 102)
		s.grant()
		assert.Equal(t, "waiting", answer(last))

		s.w.waiting[101] = []uint32{103} // on another session's lock, further on
		s.poll()
		assert.Equal(t, 1, s.e.lockWaits, "a statement that waits twice counts once")
		s.grant()
		assert.Equal(t, "forward", answer(last), "waiting again, it holds nothing back")
		assert.Equal(t, []result.Race{{Kind: result.StepBeside, Delivery: 2, Other: 1, Step: 3}}, s.e.races)
	})
	t.Run("until it waits too", func(t *testing.T) {
		s, _ := waitBehind(t, 102)
		next := s.ask(2, "UPDATE t SET n = 3 WHERE id = 2", 102)
		s.grant()
		assert.Empty(t, s.e.races)
		s.w.waiting[102] = []uint32{101}
		s.poll()
		assert.Equal(t, []result.Race{step}, s.e.races, "two statements waiting on each other: the deadlock check decides")
		assert.True(t, next.waited)
	})
	t.Run("a step that may go on after letting go", func(t *testing.T) {
		s, _ := waitBehind(t, 102)
		s.ask(2, "SELECT pg_advisory_unlock_all(), count(*) FROM t", 102)
		s.grant()
		assert.Equal(t, []result.Race{step}, s.e.races)
	})
	t.Run("a lock of another session too", func(t *testing.T) {
		s, _ := waitBehind(t, 102, 103)
		s.ask(2, "UPDATE t SET n = 3 WHERE id = 2", 102)
		s.grant()
		assert.Equal(t, []result.Race{step}, s.e.races, "backend 103 is no backend of delivery 2")
	})
	t.Run("a connection the delivery no longer has", func(t *testing.T) {
		s, _ := waitBehind(t, 102)
		s.ask(2, "UPDATE t SET n = 3 WHERE id = 2", 104)
		delete(s.w.serves, 102) // its client closed it: the server ends its transaction at its own pace
		s.grant()
		assert.Equal(t, []result.Race{step}, s.e.races)
	})
}

func TestReleasingStatements(t *testing.T) {
	for sql, want := range map[string]bool{
		"COMMIT":                         true,
		"end":                            true,
		"  /* c */ Rollback":             true,
		"ROLLBACK TO SAVEPOINT a":        true,
		"SELECT 1; COMMIT":               true,
		"PREPARE TRANSACTION 'x'":        true,
		"DISCARD ALL":                    true,
		"CALL settle($1)":                true,
		"DO $$ BEGIN COMMIT; END $$":     true,
		"SELECT pg_advisory_unlock(1)":   true,
		"SELECT pg_terminate_backend(1)": true,
		"UPDATE t SET n = 1":             false,
		"SELECT 'COMMIT'":                false,
		"UPDATE t SET n = 1 -- COMMIT":   false,
		"INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING": false,
		"SELECT CASE WHEN a THEN 1 END FROM t":            false,
		`SELECT "commit" FROM t`:                          false,
	} {
		assert.Equal(t, want, mayRelease(sql), sql)
	}
	for sql, want := range map[string]bool{
		"COMMIT":                     true,
		"rollback to savepoint a;":   true,
		"DISCARD ALL":                true,
		"SELECT 1; COMMIT":           false,
		"COMMIT; SELECT 1":           false,
		"CALL settle($1)":            false,
		"DO $$ BEGIN COMMIT; END $$": false,
		"UPDATE t SET n = 1":         false,
	} {
		assert.Equal(t, want, releasesLast(sql), sql)
	}
}

// TestCoreTwoReturnsAreARace: with a queue, two handlers that have both
// returned when the first return is taken race for the queue's ear: it
// acks them in the order their events came.
func TestCoreTwoReturnsAreARace(t *testing.T) {
	s := newScript(t, "j1a1w1 > j1a2w2@1:0 order 1,2")
	s.withQueue()
	s.start(1)
	s.start(2)
	s.e.deliveries[1].handlerDone.Store(true) // its return is on its way
	s.e.handle(event{kind: evReturned, d: s.e.deliveries[0]})
	assert.Equal(t, []result.Race{{Kind: result.ReturnsRaced, Delivery: 1, Other: 2}}, s.e.races)
}

// TestCoreCrashRefusesLaterSteps: a crash before step 2 refuses that step
// and every later one of the delivery, whose connections are cut as it
// dies; the steps it completed before stay counted.
func TestCoreCrashRefusesLaterSteps(t *testing.T) {
	s := newScript(t, "j1a1w1!crash:2")
	s.start(1)
	first := s.ask(1, "INSERT INTO t VALUES (1)", 101)
	s.grant()
	assert.Equal(t, "forward", answer(first))
	s.replied(first)

	second := s.ask(1, "INSERT INTO t VALUES (2)", 101)
	s.grant()
	assert.Equal(t, "crash", answer(second))
	d := s.e.deliveries[0]
	assert.Equal(t, dead, d.life)
	assert.Equal(t, []string{"1 dead"}, s.w.closed)
	assert.Equal(t, 1, d.done)
	assert.Contains(t, d.outcome.Fault, "crashed before step 2 reached the server")

	late := s.ask(1, "INSERT INTO t VALUES (3)", 101)
	assert.Equal(t, "crash", answer(late), "a dead delivery's later step is refused at once")
	assert.True(t, s.e.finished())
}

// TestCoreCrashAfterEffect: the provider makes the call, and the delivery
// dies as it returns, before the handler hears back.
func TestCoreCrashAfterEffect(t *testing.T) {
	s := newScript(t, "j1a1w1!crashafter:1")
	s.start(1)
	d := s.e.deliveries[0]
	call := &stepRequest{d: d, effect: true, step: wireproxy.Step{SQL: "email to a@example.com"},
		call: faults.Step{Effect: "email"}, grant: make(chan wireproxy.Action, 1)}
	s.e.handle(event{kind: evStep, d: d, req: call})
	s.grant()
	assert.Equal(t, "forward", answer(call), "the provider makes the call")
	assert.Equal(t, running, d.life)

	s.e.handle(event{kind: evStepDone, d: d, req: call})
	assert.Equal(t, dead, d.life)
	assert.Equal(t, 1, d.done, "the call counts as made")
	assert.True(t, d.durable)
	assert.Contains(t, d.outcome.Fault, "crashed right after step 1")
}

// ackQueue is a queue whose Ack and Nack complete the job at once.
type ackQueue struct{ queue.Queue }

func (ackQueue) Ack(context.Context, queue.Op) (queue.Settled, error) {
	return queue.Settled{Outcome: queue.Completed}, nil
}

func (ackQueue) Nack(context.Context, queue.Op, error) (queue.Settled, error) {
	return queue.Settled{Outcome: queue.Retry}, nil
}

type fixedClock struct{ now time.Time }

func (c *fixedClock) Now() time.Time          { return c.now }
func (c *fixedClock) Advance(d time.Duration) { c.now = c.now.Add(d) }

// withQueue gives the script's execution a queue that acks at once, its
// jobs enqueued.
func (s *script) withQueue() {
	s.e.clock = &fixedClock{}
	q := &queueRun{q: ackQueue{}, name: "job", ops: make(chan struct{}, 1), jobs: map[int]*queuedJob{}}
	q.ctx, q.cancel = context.WithCancel(s.t.Context())
	s.t.Cleanup(q.cancel)
	for _, d := range s.e.deliveries {
		q.jobs[d.spec.Job] = &queuedJob{enq: queue.Enqueued{JobID: fmt.Sprint(d.spec.Job)}}
	}
	s.e.queue = q
}

// settled waits for the queue's answer to delivery n's Ack or Nack and
// hands it to the core, as the loop does.
func (s *script) settled(n int) {
	s.t.Helper()
	q := s.e.queue
	require.NotNil(s.t, q.running, "delivery %d's ack runs", n)
	for {
		<-s.e.events.signal
		for _, ev := range s.e.events.drain() {
			s.e.handle(ev)
		}
		if q.running == nil {
			break
		}
	}
	assert.Equal(s.t, settled, s.e.deliveries[n-1].life)
}

// TestCoreCancelledHolderDoesNotStopTheNextAck is the hang of stop 45's
// CI (an asynq exploration, 30 minutes): the first delivery's statement
// runs with its commit held; the queue cancels it (its lease ran out) and
// its handler returns without the reply; the second delivery's statement
// then ends. Letting the held commit through at that point would send it
// to a connection that is gone, its reply never coming, and the step kept
// in flight kept the queue from acking the second delivery for ever.
func TestCoreCancelledHolderDoesNotStopTheNextAck(t *testing.T) {
	s := newScript(t, "j1a1w1 > j2a1w2@1:1 order 1~,2")
	s.withQueue()
	s.start(1)
	first := s.ask(1, "UPDATE t SET n = n + 1 WHERE id = 1", 101)
	s.grant()
	assert.Equal(t, "hold", answer(first))
	s.held(first)
	s.start(2)

	s.e.handle(event{kind: evReturned, d: s.e.deliveries[0], err: context.Canceled})
	assert.Nil(t, s.e.holder, "the hold ends with its delivery's return")
	assert.False(t, s.e.stepOut(), "a returned delivery whose connections ended has no step in flight")
	s.settled(1)

	second := s.ask(2, "UPDATE t SET n = n + 1 WHERE id = 1", 102)
	s.grant()
	assert.Equal(t, "forward", answer(second))
	s.replied(second)
	assert.Empty(t, s.w.commits, "no commit goes to the returned delivery's connection")
	s.e.handle(event{kind: evReturned, d: s.e.deliveries[1]})
	s.settled(2)
	assert.True(t, s.e.finished())
	require.NoError(t, s.e.failure)
}

// TestCoreStepCutAtReturnIsNotInFlight: a handler that stopped waiting
// for its statement (its context was cancelled) returns with the step
// out; its busy connection is cut as it ends, and the step no longer
// counts as in flight.
func TestCoreStepCutAtReturnIsNotInFlight(t *testing.T) {
	s := newScript(t, "j1a1w1")
	s.withQueue()
	s.start(1)
	step := s.ask(1, "SELECT pg_sleep(60)", 101)
	s.grant()
	assert.Equal(t, "forward", answer(step))
	s.e.handle(event{kind: evReturned, d: s.e.deliveries[0], err: context.Canceled})
	assert.False(t, s.e.stepOut())
	s.settled(1)
	assert.True(t, s.e.finished())
}

// TestCoreStepGivenUpIsNotGranted: a handler that stops waiting for its
// step's grant (its context ended) takes the step back. Granted later,
// it would go to nobody, and, never ending, hold back every other step
// until its delivery ended.
func TestCoreStepGivenUpIsNotGranted(t *testing.T) {
	s := newScript(t, "j1a1w1 > j1a2w2@1:0 order 2,1,2")
	s.start(1)
	s.start(2)
	first := s.ask(2, "SELECT 1", 102)
	s.grant()
	assert.Equal(t, "forward", answer(first))
	gone := s.ask(1, "UPDATE t SET n = 2 WHERE id = 1", 101)
	s.e.handle(event{kind: evGaveUp, d: gone.d, req: gone})
	s.replied(first)
	s.grant()
	assert.Equal(t, "waiting", answer(gone), "a step its handler gave up on is not granted")
	assert.Equal(t, []int{2}, s.e.granted)
	assert.False(t, s.e.stepOut())
	assert.Equal(t, []result.Race{{Kind: result.TimerFired, Delivery: 1, Step: 1}}, s.e.races,
		"the executor did not cancel it: its own clock gave up on the step the schedule held")
}

// TestCoreStepGivenUpOnTheExecutorsCancelIsNoRace: a delivery the
// executor cancelled (the queue's deadline) gives up its waiting step as
// the executor decided; the step is taken back, and nothing raced.
func TestCoreStepGivenUpOnTheExecutorsCancelIsNoRace(t *testing.T) {
	s := newScript(t, "j1a1w1")
	s.start(1)
	d := s.e.deliveries[0]
	req := s.ask(1, "UPDATE t SET n = 2 WHERE id = 1", 101)
	s.e.move(d, onRunLate)
	s.e.cancelIfWaiting(d)
	require.Equal(t, cancelled, d.life)
	s.e.handle(event{kind: evGaveUp, d: d, req: req})
	s.grant()
	assert.Equal(t, "waiting", answer(req))
	assert.Empty(t, d.pending)
	assert.Empty(t, s.e.races)
}

// TestCoreGrantThatCrossesAGiveUpIsARace: the grant goes out as the
// handler stops waiting for it; the step is never made, holds nothing
// back, and the crossing is a race.
func TestCoreGrantThatCrossesAGiveUpIsARace(t *testing.T) {
	s := newScript(t, "j1a1w1")
	s.start(1)
	req := s.ask(1, "SELECT 1", 101)
	s.grant()
	assert.Equal(t, "forward", answer(req))
	s.e.handle(event{kind: evGaveUp, d: req.d, req: req})
	assert.False(t, s.e.stepOut(), "the step given up is not in flight")
	assert.Equal(t, []result.Race{{Kind: result.GrantCrossed, Delivery: 1, Step: 1}}, s.e.races)
	next := s.ask(1, "SELECT 2", 101)
	s.grant()
	assert.Equal(t, "forward", answer(next), "the next step is granted")
}
