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
// while there are at most Plan.MaxInterleavings, a fixed sample beyond,
// and overlap their autocommit writes inside one statement: one
// statement's commit is held while the other runs (Schedule.Holds).
// Orders that differ only by swapping adjacent steps that cannot affect
// each other end in the same state, so only one of each class runs (a
// partial-order reduction): a step is free when it touches nothing the
// other delivery can see or wait for (Local: BEGIN, SAVEPOINT, RELEASE,
// SET) and it is its delivery's first step or follows a local one (see
// Free). The cap counts classes, so it covers more distinct behaviour.
// Plan.Unreduced turns the reduction off; the harness does that for a
// fault whose deliveries took other steps at the free positions than the
// clean run did.
//
// Default is the matrix a plain harness.Check runs;
// DefaultWithout(VisibilityTimeout) is that matrix minus one fault.
package faults

import (
	"cmp"
	"errors"
	"fmt"
	"time"
)

// Fault is one way a job can be delivered more than once. Its values come
// from this package's constructors; other packages cannot add kinds.
type Fault interface {
	// Name is the fault's short name, used in reports: "crash-mid-job".
	Name() Name
	// Schedules expands the fault into the schedules to execute for a job
	// whose clean run took p.Steps.
	Schedules(p Plan) []Schedule
	sealed()
}

// Plan is what a fault is expanded from: the job's clean run and the
// queue's settings.
type Plan struct {
	// Steps are the steps one clean delivery took, in order.
	Steps []Step
	// VisibilityTimeout is how long the queue waits before it redelivers
	// a job whose delivery did not ack; zero means 30s.
	VisibilityTimeout time.Duration
	// RedriveAfter is how long after a crash a human redrives the job;
	// zero means 72h, past the payment providers' 24h key window.
	RedriveAfter time.Duration
	// MaxInterleavings bounds the interleavings tried per concurrent
	// fault: all of them while there are at most this many, a fixed
	// sample beyond; zero means 24. Orders equivalent to one tried are
	// not counted (see Unreduced).
	MaxInterleavings int
	// Unreduced turns off the partial-order reduction of the concurrent
	// faults: they then try every order (or the sample), including
	// orders that differ from another only in when a delivery ran a step
	// that touches nothing the other can see (a BEGIN, a SET; see Free).
	// The harness expands a fault again with it set when a delivery did
	// not take the steps the reduction assumed.
	Unreduced bool
	// OneDeliveryAtATime says the queue hands a job ID to one delivery at
	// a time: it refuses a delivery of a job another delivery holds until
	// the visibility timeout has passed (harness.QueueRules). The second
	// delivery of ConcurrentDelivery, which starts beside the first on an
	// unmoved clock, is then never handed out, so every one of its orders
	// runs the first delivery alone: it expands to its first order only.
	// The harness expands it again without this when the queue handed the
	// second delivery out after all. ConcurrentProducerRetry's copy has a
	// job ID of its own and is not affected.
	OneDeliveryAtATime bool
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
	// Effect is the kind of effect ("email", "payment") when the step is an
	// effect call, empty for a statement; Key is the call's idempotency
	// key, if any.
	Effect string `json:",omitempty"`
	Key    string `json:",omitempty"`
}

// IsEffect reports whether the step is an effect call rather than a
// statement.
func (s Step) IsEffect() bool { return s.Effect != "" }

// Defaults for a Plan's zero fields.
const (
	DefaultVisibilityTimeout = 30 * time.Second
	DefaultRedriveAfter      = 72 * time.Hour
	DefaultMaxInterleavings  = 24
)

func (p Plan) visibility() time.Duration {
	return cmp.Or(p.VisibilityTimeout, DefaultVisibilityTimeout)
}
func (p Plan) redriveAfter() time.Duration { return cmp.Or(p.RedriveAfter, DefaultRedriveAfter) }
func (p Plan) maxInterleavings() int       { return cmp.Or(p.MaxInterleavings, DefaultMaxInterleavings) }

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
	// NameReplay is a schedule given by Replay or -twice.replay;
	// NameExplore one drawn or saved by harness.Explore.
	NameReplay  Name = "replay"
	NameExplore Name = "explore"
)

type fault struct {
	name   Name
	expand func(p Plan) []Schedule
}

func (f fault) Name() Name { return f.name }
func (f fault) Schedules(p Plan) []Schedule {
	out := f.expand(p)
	for i := range out {
		out[i].Fault = f.name
	}
	return out
}
func (fault) sealed() {}

// meaningless is what a constructor given an argument that means nothing
// returns: it expands to no schedule, and Validate says why.
type meaningless struct {
	name Name
	err  error
}

func (f meaningless) Name() Name              { return f.name }
func (meaningless) Schedules(Plan) []Schedule { return nil }
func (meaningless) sealed()                   {}

func one(ds ...Delivery) []Schedule { return []Schedule{{Deliveries: ds}} }

// Validate reports why f, as built, means nothing: a step argument below 1
// (CrashAt(0)), a Replay of a schedule that Schedule.Validate refuses, or
// a nil fault. Such a fault expands to no schedule; harness.Run refuses it
// before it starts.
func Validate(f Fault) error {
	switch f := f.(type) {
	case nil:
		return errors.New("[twice] a nil fault; build faults with the faults package's constructors")
	case meaningless:
		return f.err
	}
	return nil
}

// atStep is a fault acting on step k, or the error that k is no step: a
// step argument counts from 1, and every kind has its own way to try all
// of them (every names it).
func atStep(name Name, constructor string, k int, every string, expand func(Plan) []Schedule) Fault {
	if k < 1 {
		return meaningless{name, fmt.Errorf("[twice] faults.%s(%d): steps count from 1; %s", constructor, k, every)}
	}
	return fault{name, expand}
}

// RunTwice is the seed's cheapest check: the job completes, then the queue
// delivers the same job ID again as attempt 2, on another worker.
func RunTwice() Fault {
	return fault{NameRunTwice, func(Plan) []Schedule {
		return one(Delivery{Job: 1, Attempt: 1, Worker: 1}, Delivery{Job: 1, Attempt: 2, Worker: 2})
	}}
}

// ProducerRetry is a producer that enqueued the job twice: after the first
// copy completed, a second one with a new job ID and the same arguments
// runs.
func ProducerRetry() Fault {
	return fault{NameProducerRetry, func(Plan) []Schedule {
		return one(Delivery{Job: 1, Attempt: 1, Worker: 1}, Delivery{Job: 2, Attempt: 1, Worker: 2})
	}}
}

// CrashBeforeAck is a worker that dies after every step of the job and
// before its ack; the job is redelivered once the visibility timeout has
// passed.
func CrashBeforeAck() Fault {
	return fault{NameCrashBeforeAck, func(p Plan) []Schedule {
		return one(Delivery{Job: 1, Attempt: 1, Worker: 1, Fault: KindCrash},
			Delivery{Job: 1, Attempt: 2, Worker: 2, Advance: p.visibility()})
	}}
}

// LostAck is an ack the queue never receives: the delivery returned nil and
// its worker lives on. The redelivery, after the visibility timeout, goes
// to the same worker in one schedule and to another worker in a second.
func LostAck() Fault {
	return fault{NameLostAck, func(p Plan) []Schedule {
		first := Delivery{Job: 1, Attempt: 1, Worker: 1, Fault: KindLostAck}
		return []Schedule{
			{Deliveries: []Delivery{first, {Job: 1, Attempt: 2, Worker: 1, Advance: p.visibility()}}},
			{Deliveries: []Delivery{first, {Job: 1, Attempt: 2, Worker: 2, Advance: p.visibility()}}},
		}
	}}
}

// CrashAt is a worker that dies just before step k of the job reaches the
// server: its open transaction rolls back, its earlier commits stay. The
// job is redelivered after the visibility timeout.
func CrashAt(k int) Fault {
	if k < 1 {
		return meaningless{NameCrashMidJob, fmt.Errorf("[twice] faults.CrashAt(%d): steps count from 1 (CrashAt(1) crashes before the first statement); for a crash after the last step, before the ack, use faults.CrashBeforeAck(); for every step, faults.CrashAtEveryStep()", k)}
	}
	return fault{NameCrashMidJob, func(p Plan) []Schedule { return crashAt(p, k) }}
}

// CrashAtEveryStep is CrashAt for every step of the clean run.
func CrashAtEveryStep() Fault {
	return fault{NameCrashMidJob, func(p Plan) []Schedule {
		var out []Schedule
		for k := 1; k <= len(p.Steps); k++ {
			out = append(out, crashAt(p, k)...)
		}
		return out
	}}
}

func crashAt(p Plan, k int) []Schedule {
	return one(Delivery{Job: 1, Attempt: 1, Worker: 1, Fault: KindCrash, At: k},
		Delivery{Job: 1, Attempt: 2, Worker: 2, Advance: p.visibility()})
}

// AmbiguousCommitAt is a commit whose reply is lost: the server applies
// step k, the connection drops before the reply arrives, the delivery's
// own error path runs, and the job is redelivered after the visibility
// timeout.
func AmbiguousCommitAt(k int) Fault {
	return atStep(NameAmbiguousCommit, "AmbiguousCommitAt", k, "faults.AmbiguousCommits() tries every commit point",
		func(p Plan) []Schedule { return ambiguousAt(p, k) })
}

// AmbiguousCommits is AmbiguousCommitAt every commit point of the clean run:
// each COMMIT and each statement outside a transaction that wrote.
func AmbiguousCommits() Fault {
	return fault{NameAmbiguousCommit, func(p Plan) []Schedule {
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
	return one(Delivery{Job: 1, Attempt: 1, Worker: 1, Fault: KindAmbiguous, At: k},
		Delivery{Job: 1, Attempt: 2, Worker: 2, Advance: p.visibility()})
}

// EffectLostReplyAt is a provider whose answer to effect call k is lost:
// the provider makes the effect (sends the email, takes the payment, and
// stores the answer under the call's idempotency key), but the handler's
// call returns a timeout error, as after a read timeout or a connection
// reset, and the delivery goes on with its own error path. A delivery
// that then fails is retried by the queue after the visibility timeout.
// Step k must be an effect call of the clean run.
func EffectLostReplyAt(k int) Fault {
	return atStep(NameEffectLostReply, "EffectLostReplyAt", k, "faults.EffectLostReplies() tries every effect call",
		func(Plan) []Schedule { return effectFault(KindEffectLostReply, k) })
}

// EffectLostReplies is EffectLostReplyAt every effect call of the clean
// run.
func EffectLostReplies() Fault {
	return fault{NameEffectLostReply, func(p Plan) []Schedule { return atEveryEffect(p, KindEffectLostReply) }}
}

// EffectFailedAt is a provider that refuses effect call k before making
// it, with a transient error (a 503): nothing happens at the provider and
// nothing is stored under the call's idempotency key, so a retry makes
// the effect. The handler's call returns the error and the delivery goes
// on; one that then fails is retried by the queue after the visibility
// timeout. Step k must be an effect call of the clean run.
func EffectFailedAt(k int) Fault {
	return atStep(NameEffectFailed, "EffectFailedAt", k, "faults.EffectFailures() tries every effect call",
		func(Plan) []Schedule { return effectFault(KindEffectFailed, k) })
}

// EffectFailures is EffectFailedAt every effect call of the clean run.
func EffectFailures() Fault {
	return fault{NameEffectFailed, func(p Plan) []Schedule { return atEveryEffect(p, KindEffectFailed) }}
}

func atEveryEffect(p Plan, k Kind) []Schedule {
	var out []Schedule
	for i, s := range p.Steps {
		if s.IsEffect() {
			out = append(out, effectFault(k, i+1)...)
		}
	}
	return out
}

// effectFault is one delivery whose effect call at is hit by k; the
// queue's own retry follows if the delivery fails, so the schedule needs
// no second delivery.
func effectFault(k Kind, at int) []Schedule {
	return one(Delivery{Job: 1, Attempt: 1, Worker: 1, Fault: k, At: at})
}

// VisibilityTimeout is a job slower than the queue's visibility timeout:
// after the first delivery has done k steps the clock passes the timeout
// and a second delivery starts on another worker; it runs its steps, then
// the first one goes on. One schedule per k from 1 to the number of steps.
func VisibilityTimeout() Fault {
	return fault{NameVisibilityTimeout, func(p Plan) []Schedule {
		n := len(p.Steps)
		var out []Schedule
		for k := 1; k <= n; k++ {
			out = append(out, Schedule{
				Deliveries: []Delivery{
					{Job: 1, Attempt: 1, Worker: 1},
					{Job: 1, Attempt: 2, Worker: 2, Advance: p.visibility(), With: 1, After: k},
				},
				Order: blockAt(n, n, k, 1, 2),
			})
		}
		return out
	}}
}

// ConcurrentDelivery is the same job delivered to two workers at once
// (attempts 1 and 2 of one job ID), their steps interleaved in every order
// while there are few, a fixed sample beyond. Orders that differ only in
// when a delivery ran a free step (a BEGIN, a SET; see Free) end alike,
// so one of each such class is tried (see Plan.Unreduced). Each pair of
// the clean run's autocommit writes also runs overlapped, the first with
// its commit held while the second runs (see Schedule.Holds), so the race
// inside one statement shows. For a queue that hands a job to one
// delivery at a time (Plan.OneDeliveryAtATime) it is one order.
func ConcurrentDelivery() Fault {
	return fault{NameConcurrentDelivery, func(p Plan) []Schedule { return concurrent(p, 1) }}
}

// ConcurrentProducerRetry is the producer's two copies of the job (two
// job IDs) delivered at once, interleaved as ConcurrentDelivery.
func ConcurrentProducerRetry() Fault {
	return fault{NameConcurrentProducerRetry, func(p Plan) []Schedule { return concurrent(p, 2) }}
}

func concurrent(p Plan, secondJob int) []Schedule {
	second := Delivery{Job: secondJob, Attempt: 2, Worker: 2, With: 1}
	if secondJob != 1 {
		second.Attempt = 1
	}
	var out []Schedule
	n := len(p.Steps)
	orders := interleavings(n, n, p.maxInterleavings())
	if !p.Unreduced {
		orders = reducedInterleavings(n, p.maxInterleavings(), freeIndependence(p.Steps))
	}
	if secondJob == 1 && p.OneDeliveryAtATime {
		// The queue refuses the second delivery whatever the order, and
		// a held commit has no partner to wait for.
		orders = orders[:min(len(orders), 1)]
	}
	for _, order := range orders {
		out = append(out, Schedule{
			Deliveries: []Delivery{{Job: 1, Attempt: 1, Worker: 1}, second},
			Order:      order,
		})
	}
	if secondJob == 1 && p.OneDeliveryAtATime {
		return out
	}
	for _, o := range overlappedStatements(p.Steps) {
		o.Deliveries = []Delivery{{Job: 1, Attempt: 1, Worker: 1}, second}
		out = append(out, o)
	}
	return out
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

// Redrive is a job that died half-done and was redriven by a human days
// later, past the window in which providers remember idempotency keys: the
// first delivery crashes before step k (one schedule per step) or after its
// last step, then the clock moves Plan.RedriveAfter (72h) and the job is
// delivered again.
func Redrive() Fault {
	return fault{NameRedrive, func(p Plan) []Schedule {
		var out []Schedule
		for k := 1; k <= len(p.Steps)+1; k++ {
			at := k
			if k > len(p.Steps) {
				at = 0 // after the last step
			}
			out = append(out, one(Delivery{Job: 1, Attempt: 1, Worker: 1, Fault: KindCrash, At: at},
				Delivery{Job: 1, Attempt: 2, Worker: 2, Advance: p.redriveAfter()})...)
		}
		return out
	}}
}

// Default returns the matrix harness.Check runs when the configuration names
// no faults: run twice, producer retry, crash before ack, lost ack, crash
// at every step, ambiguous commit at every commit point, a lost answer
// and a refusal at every effect call, visibility timeout at every step,
// concurrent delivery and producer retry over their interleavings, and a
// redrive days after a crash at every step.
func Default() []Fault {
	return []Fault{
		RunTwice(), ProducerRetry(), CrashBeforeAck(), LostAck(), CrashAtEveryStep(),
		AmbiguousCommits(), EffectLostReplies(), EffectFailures(), VisibilityTimeout(),
		ConcurrentDelivery(), ConcurrentProducerRetry(), Redrive(),
	}
}

// DefaultWithout returns Default without the faults that the constructors
// in drop make: DefaultWithout(VisibilityTimeout, Redrive) is the default
// matrix minus visibility-timeout and redrive, in Default's order, with no
// need to list the rest.
//
// Pass the constructors themselves, not their results. Only constructors
// without arguments fit, and every one of them makes a fault of the
// default matrix, so an exclusion cannot name a fault that is not there.
// A nil constructor, or one that returns nil, excludes nothing.
func DefaultWithout(drop ...func() Fault) []Fault {
	dropped := map[Name]bool{}
	for _, mk := range drop {
		if mk == nil {
			continue
		}
		if f := mk(); f != nil {
			dropped[f.Name()] = true
		}
	}
	var out []Fault
	for _, f := range Default() {
		if !dropped[f.Name()] {
			out = append(out, f)
		}
	}
	return out
}

// Replay runs exactly the schedule s, as printed in a finding or parsed by
// Parse, instead of expanding a fault.
func Replay(s Schedule) Fault {
	name := s.Fault
	if name == "" {
		name = NameReplay
	}
	if err := s.Validate(); err != nil {
		return meaningless{name, fmt.Errorf("[twice] faults.Replay: %w", err)}
	}
	return fault{name, func(Plan) []Schedule {
		c := s
		c.Deliveries = append([]Delivery(nil), s.Deliveries...)
		c.Order = append([]int(nil), s.Order...)
		c.Holds = append([]int(nil), s.Holds...)
		return []Schedule{c}
	}}
}
