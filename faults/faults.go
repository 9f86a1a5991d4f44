// Package faults describes how a queue makes a job run more than once.
//
// Every fault is a schedule (see Schedule): which deliveries run, which job
// ID each carries, where each crashes or loses its reply, when each starts,
// how far the clock moves, and how overlapping deliveries' steps
// interleave. A Fault is a value built by a verb-first constructor
// (RunTwice, CrashAtEveryStep, ConcurrentDelivery); the harness expands it
// into schedules from what the job's clean reference run did (its steps),
// and executes each on a fresh database.
//
// The concurrent faults interleave two deliveries' steps in every order
// while there are at most MaxInterleavings (24), a fixed sample beyond,
// and overlap their autocommit writes inside one statement: one
// statement's commit is held while the other runs (Schedule.Holds).
// Orders that differ only by swapping adjacent steps that cannot affect
// each other end in the same state, so only one of each class runs (a
// partial-order reduction): a step is free when it touches nothing the
// other delivery can see or wait for (Step.Local: BEGIN, SAVEPOINT,
// RELEASE, SET) and it is its delivery's first step or follows a local one (see
// Free). The cap counts classes, so it covers more distinct behaviour.
// Plan.Unreduced turns the reduction off; the harness runs the orders it
// left out (Expansion.Pruned) for a fault whose deliveries took other
// steps at the free positions than the clean run did.
//
// CrashAtEveryStep and Redrive crash once per class of crash points that
// end in the same state (CrashClass): with no commit point or effect call
// between them, as inside one transaction, every crash rolls back to the
// same durable state. The rest are Expansion.Pruned, which the harness
// runs when the crashed delivery took other steps inside its class than
// the clean run did.
//
// # The default matrix
//
// Default is the matrix a plain harness.Check runs, expanded from the
// steps one clean delivery took:
//
//   - run-twice: the job completes, the same job ID is delivered again.
//   - producer-retry: a second copy with a new job ID runs after the first.
//   - late-producer-retry: only for a queue that dedups copies
//     (queue.Rules.Dedup not zero): the producer enqueues the copy after the
//     first completed, on the harness clock ("late j2a1w2").
//   - producer-retry-after-dedup: only for a queue whose dedup has a
//     window (asynq's Unique TTL, River's ByPeriod): the copy is enqueued
//     once the window has passed since the original's enqueue.
//   - crash-before-ack: every step done, the worker dies before the ack;
//     redelivered after the visibility timeout.
//   - lost-ack: the handler returned nil, the ack is lost; redelivered to
//     the same worker, and to another.
//   - crash-mid-job: the worker dies just before step k reaches the
//     server, one k of each CrashClass.
//   - ambiguous-commit: the server applies commit point k and the reply is
//     lost with its connection; the handler's error path runs, and it may
//     reconnect and retry.
//   - effect-lost-reply: the provider makes effect call k and its answer
//     is lost: the call returns a timeout error and the handler goes on.
//   - effect-failed: the provider refuses effect call k (a 503) before
//     making it; the call returns that error and the handler goes on.
//   - visibility-timeout: a second delivery starts after the first has
//     done k steps, and both go on; with queue.Model's
//     CancelAtVisibilityTimeout, or a queue adapter that cancels, the
//     first delivery's context is cancelled first and the second starts
//     once it returned. Inside one transaction one pause of each
//     PauseClass runs, and the rest when the second delivery did not wait
//     on the first one's locks.
//   - concurrent-delivery, concurrent-producer-retry: two deliveries at
//     once, their steps interleaved in every order that can differ (below),
//     and each pair of autocommit writes overlapped inside one statement.
//   - redrive: a crash at step k (one per CrashClass) or after the last
//     step, then a redelivery DefaultRedriveAfter (72h) later, past the
//     providers' key window.
//
// DefaultWithout(NameVisibilityTimeout) is that matrix minus the faults
// named. A fault is tuned where it is built: Redrive(7*24*time.Hour),
// ConcurrentDelivery(MaxInterleavings(100)). A constructor given an
// argument out of range (Redrive(0), MaxInterleavings(0)) makes a fault
// whose Validate says so; the harness refuses it before it runs anything.
//
// # Schedules as text
//
// Every schedule has a short text form, printed with every finding and
// read back by Parse (harness's -twice.replay, twice replay):
// "j1a1w1!crash:3 > +30s j1a2w2" is job 1's first attempt on worker 1
// crashing before its third step, then after 30s the second attempt on a
// new worker. A delivery's fault is one of !crash:N, !crash (before the
// ack), !lostack, !ambiguous:N (the server applies statement N, its reply
// is lost), !lostreply:N (the provider makes effect call N, its answer is
// lost), !outage:N (the same for the call's retries with its key too),
// !failed:N (the provider refuses it), !slow:N (it answers too late) and
// !crashafter:N (it makes it and the worker dies before hearing back).
// "late" marks a producer copy enqueued late; "@1:0 order 1,2,2,1" gives
// the interleaving, and "~" a held place: "j1a1w1 > j1a2w2@1:0 order 1~,2".
//
// # Statements overlapped
//
// Whole statements never show the race inside one statement: two
// deliveries of INSERT ... SELECT ... WHERE NOT EXISTS (...) without a
// unique constraint, run one after the other, insert once, but run at the
// same moment both take their snapshot before either committed, and both
// insert. So the concurrent faults also overlap each pair of the clean
// run's autocommit writes (every pair while there are at most four, each
// with its twin beyond): the harness runs the first delivery's statement
// inside a transaction it opens around it and holds the commit, and the
// handler's reply with it, while the second delivery's statement runs;
// it commits once that one has finished or waits on a lock. A statement
// that cannot run in a transaction block (VACUUM, CREATE INDEX
// CONCURRENTLY) runs as it is, and the finding says so; a commit that
// fails (a deferred constraint) reaches the handler as its statement's
// error.
//
// # Commit points
//
// A commit point is a COMMIT, or a statement outside a transaction that
// wrote, as the server saw it, not as its text reads: SELECT credit(...)
// of a plpgsql function that inserts, SELECT * FROM f() and EXPLAIN
// ANALYZE of an UPDATE are commit points, and so are CALL, DO, nextval,
// an UPDATE through a view with a rule and an INSERT whose trigger
// writes; a SELECT of a STABLE function is not. Where the text cannot
// tell, the harness asks the server in the statement's own implicit
// transaction, in the same round trip, whether it was given a
// transaction ID (PostgreSQL 13 and later). A function whose only write
// is nextval or pg_notify does not reliably make a SELECT a commit point.
package faults

import (
	"cmp"
	"fmt"
	"strings"
	"time"
)

// Fault is one way a job can be delivered more than once. Its values come
// from this package's constructors; other packages cannot add kinds.
type Fault interface {
	// Name is the fault's short name, used in reports: "crash-mid-job".
	Name() Name
	// Schedules expands the fault into the schedules to execute for a job
	// whose clean run took p.Steps: Expand(p).Run.
	Schedules(p Plan) []Schedule
	// Expand expands the fault once into the schedules to execute and
	// those a reduction left out, to run only if what it assumed did not
	// hold (see Expansion).
	Expand(p Plan) Expansion
	// Validate reports why the fault cannot run: an argument of its
	// constructor out of range. Such a fault expands to no schedule.
	Validate() error
	sealed()
}

// Expansion is a fault expanded for one plan, its schedules split by when
// they run. Only the concurrent faults and the crashes at every step
// (CrashAtEveryStep, Redrive) leave any out.
type Expansion struct {
	// Fault names the fault.
	Fault Name
	// Run are the schedules to execute.
	Run []Schedule
	// Refused are the schedules left out because the queue hands a job to
	// one delivery at a time (Plan.OneDeliveryAtATime), so their second
	// delivery would be refused and their order could not matter. Run
	// them if the queue handed a second delivery out after all.
	Refused []Schedule
	// Pruned are the orders the partial-order reduction left out as
	// equivalent to one in Run or Refused (see Free). Run them if a
	// delivery took other steps at the free positions than the clean run
	// did. Empty with Plan.Unreduced. For CrashAtEveryStep and Redrive
	// they are the crash points Classes left out, in order: run them if
	// a class's representative took other steps inside its class than
	// the clean run did.
	Pruned []Schedule
	// Classes are the runs of crash points of CrashAtEveryStep and
	// Redrive that end in the same state (see CrashClass), each run once;
	// only those of more than one crash point. Empty with Plan.Unreduced.
	Classes []CrashClass
	// Pauses are the runs of pause points of VisibilityTimeout that end
	// alike when the second delivery waits on the first one's locks (see
	// PauseClass), each run from its first point. Empty with
	// Plan.Unreduced.
	Pauses []PauseClass
}

// Plan is what a fault is expanded from: the job's clean run and the
// queue's settings.
type Plan struct {
	// Steps are the steps one clean delivery took, in order.
	Steps []Step
	// VisibilityTimeout is how long the queue waits before it redelivers
	// a job whose delivery did not ack; zero means 30s.
	VisibilityTimeout time.Duration
	// RedriveAfter is how far Generate moves the clock when it draws a
	// redrive; zero means 72h, past the payment providers' 24h key
	// window. The Redrive fault takes its own (Redrive(after)).
	RedriveAfter time.Duration
	// Unreduced turns off the reductions: the partial-order reduction of
	// the concurrent faults, which then try every order (or the sample),
	// including orders that differ from another only in when a delivery
	// ran a step that touches nothing the other can see (a BEGIN, a SET;
	// see Free), and the crash classes of CrashAtEveryStep and Redrive,
	// which then crash at every step (see CrashClass). Without it the
	// schedules left out are Expansion.Pruned.
	Unreduced bool
	// Dedup is how long the queue refuses a producer's copy of a job it
	// holds, from the original's enqueue on the harness clock; negative
	// while it holds the original in the states it dedups on (a task ID,
	// a unique state); zero when it refuses no copy (harness/queue.Rules.
	// Dedup). The late producer copies of the default matrix run only
	// for a queue that dedups: for one that does not, a copy enqueued
	// late is handed out as one enqueued early (ProducerRetry).
	Dedup time.Duration
	// ProducerRetriesWithin is the latest the job's producer retries an
	// enqueue, from the original's (its timeouts and retry budget, on the
	// harness clock); zero when it may retry at any time. A producer
	// whose retries all fall inside the queue's dedup window never makes
	// the copy ProducerRetryAfterDedup tries, which then has no schedule.
	// Copies from elsewhere (a relay, a webhook sender's retry:
	// ProducerCopyAt) are not bound by it (harness.Config).
	ProducerRetriesWithin time.Duration
	// ProducerTimeout is how long the producer waits for the queue's
	// answer to an enqueue before it retries; zero means 5s
	// (DefaultProducerTimeout). LateProducerRetry's copy arrives that
	// long after the original's enqueue (no later than
	// ProducerRetriesWithin).
	ProducerTimeout time.Duration
	// OneDeliveryAtATime says the queue hands a job ID to one delivery at
	// a time: it refuses a delivery of a job another delivery holds until
	// the visibility timeout has passed (harness/queue.Rules). The second
	// delivery of ConcurrentDelivery, which starts beside the first on an
	// unmoved clock, is then never handed out, so every one of its orders
	// runs the first delivery alone: it expands to its first order only,
	// the rest in Expansion.Refused, which the harness runs when the queue
	// handed the second delivery out after all. ConcurrentProducerRetry's
	// copy has a job ID of its own and is not affected.
	OneDeliveryAtATime bool
	// QueueStatements says the queue runs statements of its own on the
	// job's database between deliveries (a queue adapter's fetch: River's
	// rescuer, gue's lock). A pause class of VisibilityTimeout assumes
	// that only the second delivery's statements meet the locks the
	// first holds, so with QueueStatements every pause point runs: the
	// queue's fetch may wait on a lock the first delivery takes later in
	// the class (River's rescuer on the job row its completion locked).
	QueueStatements bool
	// StepTimes say how long the job's steps take on the harness clock
	// (see StepTime); none when that is not known. With them,
	// VisibilityTimeout pauses the first delivery only at the step it
	// is in when the queue gives up on it (Plan.Overlap), and not at
	// all when it has returned by then.
	StepTimes []StepTime
}

// Step is one observable action of a delivery: a statement that reached
// the server, or a call to an effect fake.
type Step struct {
	// SQL is the statement's text; for an effect call, the call as
	// assert.Effect prints it ("email to=a@b subject=...").
	SQL string
	// CommitPoint is true for a COMMIT and for a statement outside an
	// explicit transaction that wrote, as the server saw it (a SELECT of a
	// function that inserts is one): steps whose success makes work
	// durable.
	CommitPoint bool `json:",omitempty"`
	// Autocommit marks a commit point that is not a COMMIT: a statement
	// that wrote outside a transaction block, and so committed on its own
	// when it ended. Holding its commit (Schedule.Holds) lets another
	// delivery's statement run on a snapshot taken before it committed.
	Autocommit bool `json:",omitempty"`
	// Local marks a statement that touches nothing another delivery can
	// see or wait for, whatever runs around it, as the proxy read it:
	// every statement in it starts a transaction (BEGIN, START
	// TRANSACTION with any modes: the snapshot is taken at the next
	// statement), sets or releases a savepoint, or sets a session or
	// transaction setting (SET, SET LOCAL; not SET CONSTRAINTS, which
	// runs deferred checks). Effect calls and every other statement are
	// not local: a plain SELECT may call a function that writes or takes
	// a lock (nextval, pg_advisory_lock, a user's function), and nothing
	// short of asking the server could tell. The partial-order reduction
	// moves local steps (see Free).
	//
	// One thing a BEGIN does fix is the transaction's timestamp (now()):
	// a handler that compared the now() of two deliveries' transactions
	// could tell apart orders the reduction treats as one. Such a
	// comparison is a race with the wall clock in any case; twice's clock
	// (harness.Delivery.Now) does not move with steps.
	Local bool `json:",omitempty"`
	// Effect is the kind of effect ("email", "payment") when the step is an
	// effect call, empty for a statement; Key is the call's idempotency
	// key, if any.
	Effect string `json:",omitempty"`
	Key    string `json:",omitempty"`
	// HTTP marks an effect call that is an HTTP request (made through
	// harness.Delivery.HTTPClient): its client may send it again with the
	// same key within one call (an SDK's retries, net/http's replay on a
	// broken connection), so the default matrix loses its answer with
	// KindEffectOutage rather than KindEffectLostReply.
	HTTP bool `json:",omitempty"`
	// Deadline marks an HTTP call whose client waited with a deadline
	// (http.Client.Timeout, or a request context with one): an answer
	// slower than that reaches it as its own timeout (KindEffectSlow),
	// which a client may retry where it does not retry a cut
	// connection. The default matrix gives a keyless such call a slow
	// answer (EffectSlowAnswers).
	Deadline bool `json:",omitempty"`
}

// IsEffect reports whether the step is an effect call rather than a
// statement.
func (s Step) IsEffect() bool { return s.Effect != "" }

// Defaults for a Plan's zero fields.
const (
	DefaultVisibilityTimeout = 30 * time.Second
	DefaultRedriveAfter      = 72 * time.Hour
	DefaultProducerTimeout   = 5 * time.Second
	DefaultMaxInterleavings  = 24
)

func (p Plan) visibility() time.Duration {
	return cmp.Or(p.VisibilityTimeout, DefaultVisibilityTimeout)
}
func (p Plan) redriveAfter() time.Duration { return cmp.Or(p.RedriveAfter, DefaultRedriveAfter) }

// Name names a fault; Schedule.Fault and harness.Scenario.Fault hold it.
type Name string

// The names of the faults this package builds, and of the schedules
// harness runs from elsewhere.
const (
	NameRunTwice                Name = "run-twice"
	NameProducerRetry           Name = "producer-retry"
	NameCrashBeforeAck          Name = "crash-before-ack"
	NameLostAck                 Name = "lost-ack"
	NameCrashMidJob             Name = "crash-mid-job"
	NameAmbiguousCommit         Name = "ambiguous-commit"
	NameVisibilityTimeout       Name = "visibility-timeout"
	NameConcurrentDelivery      Name = "concurrent-delivery"
	NameConcurrentProducerRetry Name = "concurrent-producer-retry"
	NameRedrive                 Name = "redrive"
	NameEffectLostReply         Name = "effect-lost-reply"
	NameEffectFailed            Name = "effect-failed"
	NameEffectSlow              Name = "effect-slow"
	NameLateProducerRetry       Name = "late-producer-retry"
	NameProducerRetryAfterDedup Name = "producer-retry-after-dedup"
	NameProducerCopyAt          Name = "producer-copy-at"
	// NameReplay is a schedule given by Replay or -twice.replay;
	// NameExplore one drawn or saved by harness.Explore.
	NameReplay  Name = "replay"
	NameExplore Name = "explore"
)

type fault struct {
	name Name
	// expand makes the schedules to run; a concurrent fault's expandAll
	// also those it leaves out.
	expand    func(p Plan) []Schedule
	expandAll func(p Plan) Expansion
	err       error // why the fault cannot run (Validate)
}

func (f fault) Name() Name                  { return f.name }
func (f fault) Validate() error             { return f.err }
func (f fault) Schedules(p Plan) []Schedule { return f.Expand(p).Run }

func (f fault) Expand(p Plan) Expansion {
	e := Expansion{Fault: f.name}
	switch {
	case f.err != nil:
	case f.expandAll != nil:
		e = f.expandAll(p)
		e.Fault = f.name
	default:
		e.Run = f.expand(p)
	}
	for _, ss := range [][]Schedule{e.Run, e.Refused, e.Pruned} {
		for i := range ss {
			ss[i].Fault = f.name
		}
	}
	for i := range e.Classes {
		e.Classes[i].Run.Fault = f.name
	}
	for i := range e.Pauses {
		e.Pauses[i].Run.Fault = f.name
	}
	return e
}
func (fault) sealed() {}

// invalid is a fault that cannot run, for the harness to refuse.
func invalid(name Name, format string, args ...any) Fault {
	return fault{name: name, err: fmt.Errorf(format, args...)}
}

func one(ds ...Scheduled) []Schedule { return []Schedule{{Deliveries: ds}} }

// RunTwice is the seed's cheapest check: the job completes, then the queue
// delivers the same job ID again as attempt 2, on another worker.
func RunTwice() Fault {
	return fault{name: NameRunTwice, expand: func(Plan) []Schedule {
		return one(Scheduled{Job: 1, Attempt: 1, Worker: 1}, Scheduled{Job: 1, Attempt: 2, Worker: 2})
	}}
}

// ProducerRetry is a producer that enqueued the job twice: after the first
// copy completed, a second one with a new job ID and the same arguments
// runs.
func ProducerRetry() Fault {
	return fault{name: NameProducerRetry, expand: func(Plan) []Schedule {
		return one(Scheduled{Job: 1, Attempt: 1, Worker: 1}, Scheduled{Job: 2, Attempt: 1, Worker: 2})
	}}
}

// LateProducerRetry is a producer that enqueued the job again after the
// original completed: a retry after its own timeout (Plan.ProducerTimeout,
// 5s unless said), with a new job ID and the same arguments. The copy
// reaches the queue only then, on the harness clock ("j1a1w1 > +5s late
// j2a1w2"), so arguments a producer stamps with its clock differ from
// the original's, and a unique rule that lets go of its key once the original
// completes (asynq's Unique, a lock released on success) hands the copy
// out, where ProducerRetry's copy, enqueued with the original, is
// refused. The default matrix runs it for a queue that dedups
// (Plan.Dedup not zero).
func LateProducerRetry() Fault {
	return fault{name: NameLateProducerRetry, expand: lateCopy}
}

func lateCopy(p Plan) []Schedule {
	return one(Scheduled{Job: 1, Attempt: 1, Worker: 1}, Scheduled{Job: 2, Attempt: 1, Worker: 2, Late: true, Advance: p.producerTimeout()})
}

// producerTimeout is how long after the original's enqueue the
// producer's late retry comes: its timeout, no later than the latest it
// retries (ProducerRetriesWithin).
func (p Plan) producerTimeout() time.Duration {
	t := cmp.Or(p.ProducerTimeout, DefaultProducerTimeout)
	if p.ProducerRetriesWithin > 0 {
		t = min(t, p.ProducerRetriesWithin)
	}
	return t
}

// lateProducerRetryIfDedup is LateProducerRetry in the default matrix:
// for a queue that refuses no copy, a late copy is handed out as
// ProducerRetry's is, so it adds nothing there.
func lateProducerRetryIfDedup() Fault {
	return fault{name: NameLateProducerRetry, expand: func(p Plan) []Schedule {
		if p.Dedup == 0 {
			return nil
		}
		return lateCopy(p)
	}}
}

// dedupMargin is how far past the queue's dedup window a copy arrives.
const dedupMargin = time.Second

// ProducerRetryAfterDedup is a producer that enqueued the job again once
// the queue's dedup window (Plan.Dedup: asynq's Unique TTL, River's
// ByPeriod) had passed since the original's enqueue: the clock moves past
// it (by a second) after the original completed, and the copy reaches the
// queue then ("j1a1w1 > +1h1s late j2a1w2"). A queue whose dedup has no
// window (Plan.Dedup zero or negative) gets no schedule of it, nor does
// a producer that retries only inside the window
// (Plan.ProducerRetriesWithin).
func ProducerRetryAfterDedup() Fault {
	return fault{name: NameProducerRetryAfterDedup, expand: func(p Plan) []Schedule {
		if p.Dedup <= 0 || p.ProducerRetriesWithin > 0 && p.ProducerRetriesWithin < p.Dedup+dedupMargin {
			return nil
		}
		return one(Scheduled{Job: 1, Attempt: 1, Worker: 1}, Scheduled{Job: 2, Attempt: 1, Worker: 2, Late: true, Advance: p.Dedup + dedupMargin})
	}}
}

// ProducerCopyAt is a copy of the job enqueued after from the original's
// enqueue, by another way than the producer's own retry: an outbox relay
// that publishes again after a restart (5 minutes), a webhook sender that
// retries hours later (3 hours). The original completes, the clock moves
// on by after, and the copy, with a new job ID and the same arguments,
// reaches the queue then ("j1a1w1 > +3h late j2a1w2"); the queue's dedup
// refuses it or hands it out as the queue would at that time. It is not
// in the default matrix, and Plan.ProducerRetriesWithin does not bound
// it.
func ProducerCopyAt(after time.Duration) Fault {
	if after <= 0 {
		return invalid(NameProducerCopyAt, "faults.ProducerCopyAt(%s): the copy comes after the original's enqueue; give a positive duration, like 5*time.Minute", after)
	}
	return fault{name: NameProducerCopyAt, expand: func(Plan) []Schedule {
		return one(Scheduled{Job: 1, Attempt: 1, Worker: 1}, Scheduled{Job: 2, Attempt: 1, Worker: 2, Late: true, Advance: after})
	}}
}

// CrashBeforeAck is a worker that dies after every step of the job and
// before its ack; the job is redelivered once the visibility timeout has
// passed.
func CrashBeforeAck() Fault {
	return fault{name: NameCrashBeforeAck, expand: func(p Plan) []Schedule {
		return one(Scheduled{Job: 1, Attempt: 1, Worker: 1, Fault: KindCrash},
			Scheduled{Job: 1, Attempt: 2, Worker: 2, Advance: p.visibility()})
	}}
}

// LostAck is an ack the queue never receives: the delivery returned nil and
// its worker lives on. The redelivery, after the visibility timeout, goes
// to the same worker in one schedule and to another worker in a second.
func LostAck() Fault {
	return fault{name: NameLostAck, expand: func(p Plan) []Schedule {
		first := Scheduled{Job: 1, Attempt: 1, Worker: 1, Fault: KindLostAck}
		return []Schedule{
			{Deliveries: []Scheduled{first, {Job: 1, Attempt: 2, Worker: 1, Advance: p.visibility()}}},
			{Deliveries: []Scheduled{first, {Job: 1, Attempt: 2, Worker: 2, Advance: p.visibility()}}},
		}
	}}
}

// CrashAt is a worker that dies just before step k of the job reaches the
// server: its open transaction rolls back, its earlier commits stay. The
// job is redelivered after the visibility timeout. Steps count from 1;
// CrashBeforeAck is the crash after the last one.
func CrashAt(k int) Fault {
	if k < 1 {
		return invalid(NameCrashMidJob, "faults.CrashAt(%d): steps count from 1; for a crash after the last step use faults.CrashBeforeAck()", k)
	}
	return fault{name: NameCrashMidJob, expand: func(p Plan) []Schedule { return crashAt(p, k) }}
}

// CrashAtEveryStep is CrashAt for every step of the clean run, one crash
// point of each class of those that end in the same state (see
// CrashClass): the crash points inside one transaction, with no commit
// point or effect call between them, run once.
func CrashAtEveryStep() Fault {
	return fault{name: NameCrashMidJob, expandAll: func(p Plan) Expansion {
		return crashPoints(p, func(k int) Schedule { return crashAt(p, k)[0] })
	}}
}

func crashAt(p Plan, k int) []Schedule {
	return one(Scheduled{Job: 1, Attempt: 1, Worker: 1, Fault: KindCrash, At: k},
		Scheduled{Job: 1, Attempt: 2, Worker: 2, Advance: p.visibility()})
}

// AmbiguousCommitAt is a commit whose reply is lost: the server applies
// step k, the connection drops before the reply arrives, the delivery's
// own error path runs, and the job is redelivered after the visibility
// timeout.
func AmbiguousCommitAt(k int) Fault {
	if k < 1 {
		return invalid(NameAmbiguousCommit, "faults.AmbiguousCommitAt(%d): steps count from 1", k)
	}
	return fault{name: NameAmbiguousCommit, expand: func(p Plan) []Schedule { return ambiguousAt(p, k) }}
}

// AmbiguousCommits is AmbiguousCommitAt every commit point of the clean run:
// each COMMIT and each statement outside a transaction that wrote.
func AmbiguousCommits() Fault {
	return fault{name: NameAmbiguousCommit, expand: func(p Plan) []Schedule {
		var out []Schedule
		for i, s := range p.Steps {
			if s.CommitPoint {
				out = append(out, ambiguousAt(p, i+1)...)
			}
		}
		return out
	}}
}

func ambiguousAt(p Plan, k int) []Schedule {
	return one(Scheduled{Job: 1, Attempt: 1, Worker: 1, Fault: KindAmbiguous, At: k},
		Scheduled{Job: 1, Attempt: 2, Worker: 2, Advance: p.visibility()})
}

// EffectLostReplyAt is a provider whose answer to effect call k is lost:
// the provider makes the effect (sends the email, takes the payment, and
// stores the answer under the call's idempotency key), but the handler's
// call returns a timeout error, as after a read timeout or a connection
// reset, and the delivery goes on with its own error path. A delivery
// that then fails is retried by the queue after the visibility timeout.
// Step k must be an effect call of the clean run.
func EffectLostReplyAt(k int) Fault {
	return effectAt("EffectLostReplyAt", NameEffectLostReply, KindEffectLostReply, k)
}

// EffectLostReplies is EffectLostReplyAt every effect call of the clean
// run, except that an HTTP call with an idempotency key (Step.HTTP) gets
// EffectOutageAt: a lost answer that its client's own retry with the same
// key recovers is no finding and is not worth a scenario, while losing
// the call and all those retries reaches the handler's error path.
func EffectLostReplies() Fault {
	return fault{name: NameEffectLostReply, expand: func(p Plan) []Schedule {
		return atEffects(p, func(s Step) Kind {
			if s.HTTP && s.Key != "" {
				return KindEffectOutage
			}
			return KindEffectLostReply
		})
	}}
}

// EffectOutageAt is EffectLostReplyAt for effect call k and for every
// retry of it with the same idempotency key in the delivery
// (KindEffectOutage): the provider makes the call, answers every retry
// from the key, and no answer arrives, as in an outage longer than the
// client's retries. Step k must be an effect call of the clean run.
func EffectOutageAt(k int) Fault {
	return effectAt("EffectOutageAt", NameEffectLostReply, KindEffectOutage, k)
}

// EffectSlowAt is a provider that makes effect call k but answers only
// after the client gave up waiting (KindEffectSlow): an HTTP call returns
// at once the error of the client's own timeout, as net/http makes it,
// with no wall-clock wait; the delivery goes on. Step k must be an effect
// call of the clean run. The default matrix has it where it can find
// what a lost reply does not (EffectSlowAnswers).
func EffectSlowAt(k int) Fault { return effectAt("EffectSlowAt", NameEffectSlow, KindEffectSlow, k) }

// EffectSlowAnswers is EffectSlowAt every HTTP call of the clean run that
// carries no idempotency key and whose client waited with a deadline
// (Step.Deadline): there a timeout is an answer the client can get, and
// code that retries a timed-out call (a webhook sender's loop on
// net.Error's Timeout) sends it again where after a cut connection
// (EffectLostReplies) it gives up. A call with a key is left out: a
// retry under the key is answered from it, and stripe-go's and
// net/http's clients treat a timeout as they do a cut connection, which
// the outage covers. A call whose client waits for ever never times out.
func EffectSlowAnswers() Fault {
	return fault{name: NameEffectSlow, expand: func(p Plan) []Schedule {
		return atEffects(p, func(s Step) Kind {
			if s.HTTP && s.Key == "" && s.Deadline {
				return KindEffectSlow
			}
			return KindNone
		})
	}}
}

// EffectFailedAt is a provider that refuses effect call k before making
// it, with a transient error (a 503): nothing happens at the provider and
// nothing is stored under the call's idempotency key, so a retry makes
// the effect. The handler's call returns the error and the delivery goes
// on; one that then fails is retried by the queue after the visibility
// timeout. Step k must be an effect call of the clean run.
func EffectFailedAt(k int) Fault {
	return effectAt("EffectFailedAt", NameEffectFailed, KindEffectFailed, k)
}

// EffectFailures is EffectFailedAt every effect call of the clean run.
func EffectFailures() Fault {
	return fault{name: NameEffectFailed, expand: func(p Plan) []Schedule {
		return atEffects(p, func(Step) Kind { return KindEffectFailed })
	}}
}

// atEffects is effectFault at every effect call of the clean run, of the
// kind kindOf gives the call; KindNone leaves the call out.
func atEffects(p Plan, kindOf func(Step) Kind) []Schedule {
	var out []Schedule
	for i, s := range p.Steps {
		if k := kindOf(s); s.IsEffect() && k != KindNone {
			out = append(out, effectFault(k, i+1)...)
		}
	}
	return out
}

// effectAt is the fault name whose effect call k meets kind; ctor is the
// constructor it was given to, for the error when k is below 1.
func effectAt(ctor string, name Name, kind Kind, k int) Fault {
	if k < 1 {
		return invalid(name, "faults.%s(%d): steps count from 1", ctor, k)
	}
	return fault{name: name, expand: func(Plan) []Schedule { return effectFault(kind, k) }}
}

// effectFault is one delivery whose effect call at is hit by k; the
// queue's own retry follows if the delivery fails, so the schedule needs
// no second delivery.
func effectFault(k Kind, at int) []Schedule {
	return one(Scheduled{Job: 1, Attempt: 1, Worker: 1, Fault: k, At: at})
}

// VisibilityTimeout is a job slower than the queue's visibility timeout:
// after the first delivery has done k steps the clock passes the timeout
// and a second delivery starts on another worker; it runs its steps, then
// the first one goes on. One schedule per k from 1 to the number of
// steps, but for the pause points of a class (PauseClass) inside one
// transaction: its first runs, and the others only when the second
// delivery did not wait there on the first one's locks.
//
// With Plan.StepTimes the job's timing is known: the first delivery is
// paused only at the step it is in when the queue gives up on it, before
// and after that step (Plan.Overlap), and a job that has returned by then
// has no schedule of this fault.
func VisibilityTimeout() Fault {
	return fault{name: NameVisibilityTimeout, expandAll: func(p Plan) Expansion {
		n := len(p.Steps)
		build := func(k int) Schedule {
			return Schedule{
				Deliveries: []Scheduled{
					{Job: 1, Attempt: 1, Worker: 1},
					{Job: 1, Attempt: 2, Worker: 2, Advance: p.visibility(), With: 1, After: k},
				},
				Order: blockAt(n, n, k, 1, 2),
			}
		}
		if o := p.Overlap(); o != nil {
			var e Expansion
			for _, k := range o.pauses() {
				e.Run = append(e.Run, build(k))
			}
			return e
		}
		return pausePoints(p, build)
	}}
}

// ConcurrentDelivery is the same job delivered to two workers at once
// (attempts 1 and 2 of one job ID), their steps interleaved in every order
// while there are at most 24 (MaxInterleavings), a fixed sample beyond.
// Orders that differ only in
// when a delivery ran a free step (a BEGIN, a SET; see Free) end alike,
// so one of each such class is tried (see Plan.Unreduced). Each pair of
// the clean run's autocommit writes also runs overlapped, the first with
// its commit held while the second runs (see Schedule.Holds), so the race
// inside one statement shows. For a queue that hands a job to one
// delivery at a time (Plan.OneDeliveryAtATime) it is one order.
func ConcurrentDelivery(opts ...ConcurrentOption) Fault {
	return concurrentFault(NameConcurrentDelivery, 1, opts)
}

// ConcurrentProducerRetry is the producer's two copies of the job (two
// job IDs) delivered at once, interleaved as ConcurrentDelivery.
func ConcurrentProducerRetry(opts ...ConcurrentOption) Fault {
	return concurrentFault(NameConcurrentProducerRetry, 2, opts)
}

// A ConcurrentOption tunes ConcurrentDelivery or ConcurrentProducerRetry.
type ConcurrentOption interface{ apply(*concurrency) }

type concurrency struct {
	maxInterleavings int
	err              error
}

type maxInterleavings int

func (m maxInterleavings) apply(c *concurrency) {
	if m < 1 && c.err == nil {
		c.err = fmt.Errorf("faults.MaxInterleavings(%d): a concurrent fault tries at least one interleaving", int(m))
	}
	c.maxInterleavings = int(m)
}

// MaxInterleavings bounds the interleavings a concurrent fault tries: all
// of them while there are at most n, a fixed sample of n beyond; without
// it, DefaultMaxInterleavings (24). Orders equivalent to one tried are not
// counted (see Free), so the cap covers distinct behaviour. n below 1 is
// refused.
func MaxInterleavings(n int) ConcurrentOption { return maxInterleavings(n) }

func concurrentFault(name Name, secondJob int, opts []ConcurrentOption) Fault {
	c := concurrency{maxInterleavings: DefaultMaxInterleavings}
	for _, o := range opts {
		if o == nil {
			return invalid(name, "faults.%s: a nil option", constructorOf(name))
		}
		o.apply(&c)
	}
	if c.err != nil {
		return fault{name: name, err: c.err}
	}
	return fault{name: name, expandAll: func(p Plan) Expansion { return concurrent(p, secondJob, c.maxInterleavings) }}
}

func constructorOf(name Name) string {
	if name == NameConcurrentProducerRetry {
		return "ConcurrentProducerRetry"
	}
	return "ConcurrentDelivery"
}

// concurrent expands a concurrent fault once: the orders to run, those
// the queue would refuse (one delivery at a time) and those the
// partial-order reduction leaves out, told apart by their orders.
func concurrent(p Plan, secondJob, max int) Expansion {
	second := Scheduled{Job: secondJob, Attempt: 2, Worker: 2, With: 1}
	if secondJob != 1 {
		second.Attempt = 1
	}
	deliveries := func() []Scheduled { return []Scheduled{{Job: 1, Attempt: 1, Worker: 1}, second} }
	of := func(orders [][]int) []Schedule {
		var out []Schedule
		for _, order := range orders {
			out = append(out, Schedule{Deliveries: deliveries(), Order: order})
		}
		return out
	}
	n := len(p.Steps)
	every := interleavings(n, n, max)
	orders := every
	var pruned [][]int
	if !p.Unreduced {
		orders = reducedInterleavings(n, max, freeIndependence(p.Steps))
		kept := map[string]bool{}
		for _, o := range orders {
			kept[string(toBytes(o))] = true
		}
		for _, o := range every {
			if !kept[string(toBytes(o))] {
				pruned = append(pruned, o)
			}
		}
	}
	whole := of(orders)
	for _, o := range overlappedStatements(p.Steps) {
		o.Deliveries = deliveries()
		whole = append(whole, o)
	}
	e := Expansion{Run: whole, Pruned: of(pruned)}
	if secondJob == 1 && p.OneDeliveryAtATime {
		// The queue refuses the second delivery whatever the order, and
		// a held commit has no partner to wait for.
		run := min(len(orders), 1)
		e.Run, e.Refused = whole[:run:run], whole[run:]
	}
	return e
}

// maxOverlapWrites bounds the autocommit writes whose every pair is
// overlapped; beyond it only each write with its own twin is.
const maxOverlapWrites = 4

// overlappedStatements are the orders, with their held places, that run
// an autocommit write of delivery 1 and one of delivery 2 on snapshots
// taken before either committed: delivery 1 runs up to write i and
// delivery 2 up to write j, then write i runs with its commit held while
// write j runs. Whole statements in turn cannot show the race inside one
// statement (both deliveries' INSERT ... WHERE NOT EXISTS see no row and
// both insert). Each pair of the clean run's autocommit writes is
// overlapped, or only each write with its twin when there are more than
// maxOverlapWrites. A read is never held: overlapping it is the same as
// running it first, which the interleavings already do.
func overlappedStatements(steps []Step) []Schedule {
	var writes []int // 1-based steps
	for i, s := range steps {
		if s.Autocommit && s.CommitPoint && !s.IsEffect() {
			writes = append(writes, i+1)
		}
	}
	var out []Schedule
	for _, i := range writes {
		for _, j := range writes {
			if i != j && len(writes) > maxOverlapWrites {
				continue
			}
			var order []int
			for range i - 1 {
				order = append(order, 1)
			}
			for range j - 1 {
				order = append(order, 2)
			}
			order = append(order, 1, 2)
			out = append(out, Schedule{Order: order, Holds: []int{len(order) - 1}})
		}
	}
	return out
}

// Redrive is a job that died half-done and was redriven by a human after
// a while, on the harness clock: the first delivery crashes before step k
// (one schedule per class of crash points that end in the same state, as
// CrashAtEveryStep) or after its last step, then the clock moves
// after and the job is delivered again. The default matrix's redrive is
// Redrive(DefaultRedriveAfter), 72h: past the 24h window in which
// payment providers remember idempotency keys. after must be positive,
// and longer than the queue's visibility timeout, or the queue would have
// handed the job out again itself (the harness refuses it then).
func Redrive(after time.Duration) Fault {
	if after <= 0 {
		return invalid(NameRedrive, "faults.Redrive(%s): a redrive comes after the crash; give a positive duration, like faults.DefaultRedriveAfter (72h)", after)
	}
	return fault{name: NameRedrive, expandAll: func(p Plan) Expansion {
		redrive := func(at int) Schedule {
			return one(Scheduled{Job: 1, Attempt: 1, Worker: 1, Fault: KindCrash, At: at},
				Scheduled{Job: 1, Attempt: 2, Worker: 2, Advance: after})[0]
		}
		e := crashPoints(p, redrive)
		e.Run = append(e.Run, redrive(0)) // after the last step
		return e
	}}
}

// Default returns the matrix harness.Check runs when the configuration names
// no faults: run twice, producer retry, crash before ack, lost ack, crash
// at every step, ambiguous commit at every commit point, a lost answer
// and a refusal at every effect call, a slow answer at every keyless HTTP
// call whose client has a timeout, visibility timeout at every step,
// concurrent delivery and producer retry over their interleavings, and a
// redrive days after a crash at every step (Redrive(DefaultRedriveAfter)).
// For a queue that dedups producer copies (Plan.Dedup not zero) it also
// runs a copy enqueued after the original completed (LateProducerRetry)
// and, when the dedup has a window, one past it (ProducerRetryAfterDedup).
func Default() []Fault {
	return []Fault{
		RunTwice(), ProducerRetry(), lateProducerRetryIfDedup(), ProducerRetryAfterDedup(), CrashBeforeAck(), LostAck(), CrashAtEveryStep(),
		AmbiguousCommits(), EffectLostReplies(), EffectSlowAnswers(), EffectFailures(), VisibilityTimeout(),
		ConcurrentDelivery(), ConcurrentProducerRetry(), Redrive(DefaultRedriveAfter),
	}
}

// DefaultWithout returns Default without the faults named in drop:
// DefaultWithout(NameVisibilityTimeout, NameRedrive) is the default
// matrix minus visibility-timeout and redrive, in Default's order, with
// no need to list the rest. To change one fault of the matrix, drop it
// and append it built as wanted:
//
//	append(faults.DefaultWithout(faults.NameRedrive), faults.Redrive(7*24*time.Hour))
//
// A name of no fault of the default matrix (a typo, NameReplay) drops
// nothing; it adds a fault whose Validate says so, which the harness
// refuses before it runs anything.
func DefaultWithout(drop ...Name) []Fault {
	dropped := map[Name]bool{}
	for _, n := range drop {
		dropped[n] = true
	}
	var out []Fault
	for _, f := range Default() {
		if dropped[f.Name()] {
			delete(dropped, f.Name())
			continue
		}
		out = append(out, f)
	}
	for _, n := range drop {
		if dropped[n] {
			delete(dropped, n)
			out = append(out, invalid(n, "faults.DefaultWithout(%q): no fault of the default matrix is named so; its names are %s", n, defaultNames()))
		}
	}
	return out
}

func defaultNames() string {
	var names []string
	for _, f := range Default() {
		names = append(names, string(f.Name()))
	}
	return strings.Join(names, ", ")
}

// Replay runs exactly the schedule s, as printed in a finding or parsed by
// Parse, instead of expanding a fault.
func Replay(s Schedule) Fault {
	name := s.Fault
	if name == "" {
		name = NameReplay
	}
	if err := s.Validate(); err != nil {
		return invalid(name, "faults.Replay: %v", err)
	}
	return fault{name: name, expand: func(Plan) []Schedule {
		c := s
		c.Deliveries = append([]Scheduled(nil), s.Deliveries...)
		c.Order = append([]int(nil), s.Order...)
		c.Holds = append([]int(nil), s.Holds...)
		return []Schedule{c}
	}}
}
