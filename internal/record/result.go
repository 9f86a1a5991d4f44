// Package record is the typed result of a check and the protocol between
// a check and the twice runner: harness fills a Result, Check writes it as
// a Record into $TWICE_REPORT_DIR, and cmd/twice reads it back. Nothing
// here is text meant to be parsed again: problems, steps and statuses are
// values, and words are made from them only by internal/render.
//
// The package imports neither harness nor any PostgreSQL provider, so the
// runner that reads records links neither.
package record

import (
	"time"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
)

// Status is the outcome of a whole check.
type Status string

// Statuses of a check.
const (
	// Passed: every scenario was idempotent.
	Passed Status = "passed"
	// Finding: some scenario was not idempotent, and nothing said so
	// before.
	Finding Status = "finding"
	// ExpectedFinding: some scenario was not idempotent, as
	// Config.ExpectFinding says.
	ExpectedFinding Status = "expected-finding"
	// Flaky: one schedule gave different verdicts on different runs.
	Flaky Status = "flaky"
	// InternalError: the check itself could not run (no PostgreSQL, a
	// broken setup, a comparer that panics); it says nothing of the job.
	InternalError Status = "internal-error"
	// UserError: the check could not run because of the user's code or
	// configuration (a handler or worker factory that fails on the clean
	// run, a setup step that fails, input that means nothing); it says
	// nothing of the job's idempotency, and nothing of twice.
	UserError Status = "user-error"
)

// Verdict is one scenario's outcome.
type Verdict string

// Verdicts of a scenario.
const (
	// Idempotent: the scenario ended in the reference state and the job
	// completed.
	Idempotent Verdict = "idempotent"
	// NotIdempotent: the state or the effects differ from the reference,
	// or the job could not complete.
	NotIdempotent Verdict = "not-idempotent"
)

// ProblemKind says what is wrong with a scenario.
type ProblemKind string

// Kinds of problem.
const (
	// StateDiffers: a table's rows differ from one clean run
	// (Problem.Table; the diff is in Scenario.StateDiff).
	StateDiffers ProblemKind = "state-differs"
	// EffectsDiffer: the effects break their policies against one clean
	// run (Problem.Missing, Problem.Extra; Scenario.EffectDiff).
	EffectsDiffer ProblemKind = "effects-differ"
	// DidNotComplete: after the faults the job's last delivery still
	// failed (Problem.Job, Problem.Detail).
	DidNotComplete ProblemKind = "did-not-complete"
	// NotDelivered: the queue never delivered a copy of the job.
	NotDelivered ProblemKind = "not-delivered"
	// Internal: the harness broke while running the scenario
	// (Problem.Detail).
	Internal ProblemKind = "internal"
)

// Problem is one reason a scenario is not idempotent.
type Problem struct {
	Kind ProblemKind
	// Table is the differing table of a StateDiffers problem.
	Table string `json:",omitempty"`
	// Missing and Extra count the effects an EffectsDiffer problem
	// lacks and adds.
	Missing int `json:",omitempty"`
	Extra   int `json:",omitempty"`
	// Detail says why a DidNotComplete, NotDelivered or Internal problem
	// arose, in words: "job twice-job-1: its last delivery j1a3w3
	// (attempt 3) returned an error: ...".
	Detail string `json:",omitempty"`
}

// Result is everything one check learned about a job.
type Result struct {
	// Job is the job's name.
	Job string
	// Status is the check's outcome.
	Status Status
	// Reference is the state after one clean delivery.
	Reference *assert.Snapshot
	// Volatile lists the "table.column"s that differed between two clean
	// reference runs (now(), random UUIDs), and inside json/jsonb columns
	// only the differing paths, "table.column.key.sub"; they are left out
	// of every comparison. Tables and columns the user ignored are not
	// listed.
	Volatile []string
	// ReferenceEffects are the effects of one clean delivery.
	ReferenceEffects []assert.Effect
	// VolatileEffects are effect payload fields that differed between the
	// two clean runs, left out of every comparison.
	VolatileEffects []string
	// Steps are the steps one clean delivery took: the fault points.
	Steps []faults.Step
	// Scenarios holds one entry per executed schedule, in order.
	Scenarios []Scenario
	// Shard is the share of the check's schedules this run executed
	// when it ran as one shard of several (-twice.shard), else nil.
	Shard *Shard `json:",omitempty"`

	// Reductions say, for each concurrent fault whose interleavings the
	// partial-order reduction thinned, how many orders it left out and
	// whether it had to run them after all.
	Reductions []Reduction `json:",omitempty"`
	// ExpectFinding is Config.ExpectFinding: the reason the job is known
	// not to be idempotent, or empty.
	ExpectFinding string
	// Duration is the wall time of the whole run.
	Duration time.Duration
}

// Idempotent reports whether every scenario was idempotent.
func (r *Result) Idempotent() bool { return len(r.Failed()) == 0 }

// Failed returns the scenarios that were not idempotent.
func (r *Result) Failed() []Scenario {
	var out []Scenario
	for _, s := range r.Scenarios {
		if s.Verdict != Idempotent {
			out = append(out, s)
		}
	}
	return out
}

// Shard is the share of a check's schedules one shard ran: the
// schedules whose Index modulo Count is Index-1.
type Shard struct {
	// Index is the shard's number, 1 to Count.
	Index int
	// Count is how many shards the check's schedules were split into.
	Count int
	// Schedules counts the check's schedules, every shard's together; 0
	// for an exploration, whose shards draw their own.
	Schedules int `json:",omitempty"`
	// Faults are the faults of the whole check, each once, in the order
	// of their first schedule: a shard's report lists the faults it ran
	// no schedule of, so shards' reports merge in the unsharded order.
	Faults []faults.Name `json:",omitempty"`
}

// Reduction is what the partial-order reduction did to one concurrent
// fault: it ran one order of each class of orders that differ only in
// when a delivery ran a step that touches nothing the other delivery can
// see (faults.Free), and left the others out. When a delivery's actual
// steps broke that assumption, the orders left out ran as well, after the
// others, and Diverged says where. For a queue that hands a job to one
// delivery at a time, concurrent-delivery runs one order (Refused,
// HandedOut).
type Reduction struct {
	// Fault is the concurrent fault.
	Fault faults.Name
	// Orders is how many orders ran before any fallback.
	Orders int
	// Pruned is how many orders of the unreduced expansion were left
	// out as equivalent to one that ran (or, with Diverged, ran after).
	Pruned int
	// Diverged is the first place where a delivery did not take the
	// step the reduction assumed; nil when every one did.
	Diverged *Divergence `json:",omitempty"`
	// Refused counts the orders of Pruned left out because the queue
	// hands a job to one delivery at a time
	// (harness.QueueRules.OneDeliveryAtATime), so it refuses the second
	// delivery whatever the order; the rest the partial-order reduction
	// left out.
	Refused int `json:",omitempty"`
	// HandedOut is a scenario whose second delivery the queue handed out
	// all the same; the Refused orders then ran too, after the others.
	// nil when the queue refused it.
	HandedOut *faults.Schedule `json:",omitempty"`
}

// Divergence is a delivery of a reduced scenario that took, at a
// position the reduction treated as free, a step that is not local, or
// no step at all, or that ended right after it.
type Divergence struct {
	// Schedule is the scenario's schedule.
	Schedule faults.Schedule
	// Delivery is the delivery, 1-based, as in Schedule.Order; Step the
	// position, 1-based, among the steps it asked for.
	Delivery int
	Step     int
	// Took is the step it took there; nil when it took none.
	Took *faults.Step `json:",omitempty"`
}

// Scenario is one schedule executed on one fresh database.
type Scenario struct {
	// Fault is the name of the fault the schedule came from.
	Fault faults.Name
	// Schedule is what ran; in JSON, its text form.
	Schedule faults.Schedule
	// Index is the schedule's place, from 0, among every schedule of the
	// check (every shard's together): a sharded run's scenarios keep the
	// places they would have had unsharded.
	Index int
	// Verdict is the outcome.
	Verdict Verdict
	// Problems say why the verdict is NotIdempotent.
	Problems []Problem
	// StateDiff holds the tables whose rows differ from the reference.
	StateDiff []assert.TableDiff
	// Effects are the effects the scenario's deliveries made, in order.
	Effects []assert.Effect
	// EffectDiff is how Effects break their policies against the
	// reference's, or nil.
	EffectDiff *assert.EffectDiff
	// Deliveries are the deliveries as they ran, in start order.
	Deliveries []DeliveryOutcome
	// Order is the interleaving as it happened: for each granted step,
	// the number of its delivery (1-based, as in Schedule.Order).
	Order []int
	// LockWaits counts granted steps that waited on a lock another
	// delivery held; the executor ran the other delivery meanwhile.
	LockWaits int
	// Database is the connection string of the scenario's database when
	// it was kept as evidence, otherwise empty. It carries no password (it
	// is printed and stored in reports): psql asks for it, or reads
	// PGPASSWORD.
	Database string
	// Dump is the file holding a plain-SQL dump of the kept database when
	// the server dies with the test binary (local cluster, Docker), so
	// Database no longer answers once the test has exited; empty
	// otherwise. Restore it with createdb NAME && psql -d NAME -f Dump.
	Dump string `json:",omitempty"`
	// DumpError says why the kept database could not be dumped when its
	// server dies with the test binary: the evidence is then lost once
	// the test has exited, and Database no longer answers.
	DumpError string `json:",omitempty"`
	// Duration is the wall time of fresh state, deliveries, snapshot and
	// diff.
	Duration time.Duration
}

// DeliveryOutcome is what one delivery did.
type DeliveryOutcome struct {
	// Delivery is the delivery as scheduled (a queue's retry after a
	// failure is added by the harness).
	Delivery faults.Delivery
	// JobID and Attempt are what the handler was given; Worker numbers
	// the worker that ran it.
	JobID   string
	Attempt int
	Worker  int
	// Fault says what went wrong by design: "crashed before step 3
	// reached the server: INSERT ...", "returned nil, but its ack was
	// lost", "lost the answer to step 2, which the provider made; the
	// call timed out: ...". A delivery an effect fault hit lives on, so
	// Err may follow.
	Fault string
	// Err is the error the handler returned, or empty. A delivery that
	// crashed has none: its return value is ignored.
	Err string
	// Steps are the steps the delivery completed, in order; a redelivery
	// that found the job done takes fewer than the clean run.
	Steps []faults.Step
	// Faulted is the step the schedule's fault hit when it is not among
	// Steps: the one a crash kept from the server or provider, or the
	// statement an ambiguous fault applied without a reply. It is step
	// Delivery.At of the delivery and holds its place in Order. nil when
	// no fault hit such a step: an ambiguous effect call, and an effect
	// call whose answer was lost or that the provider refused, completed
	// as a step, so they are in Steps.
	Faulted *faults.Step `json:",omitempty"`
	// QueueRetry marks the clean redelivery the queue made because the
	// job's last scheduled delivery failed (or, with a queue adapter,
	// because the queue still held the job: a retry, a snooze).
	QueueRetry bool
	// Kind is why the queue handed the job out this time.
	Kind DeliveryKind `json:",omitempty"`
	// NotDelivered says why the queue did not hand the job out for this
	// delivery (a producer copy refused as a duplicate, a job already
	// completed or still held by another attempt); empty when it did. A
	// delivery that was not made ran no handler: it is never "handled".
	NotDelivered string `json:",omitempty"`
	// Settled is what the queue recorded when the handler returned
	// ("completed", "retry in 1s", "snoozed for 5m0s"); empty when nothing
	// was recorded (the worker died, the ack was lost) or the job has no
	// queue adapter.
	Settled string `json:",omitempty"`
	// Unheld says why a step the schedule held (Schedule.Holds) ran
	// without its commit held: "step 2 ran as it is: VACUUM cannot run
	// inside a transaction block"; empty when every hold took.
	Unheld string `json:",omitempty"`
	// Held are the delivery's steps (1-based) whose commit the schedule
	// held while another delivery's step ran (Schedule.Holds).
	Held []int `json:",omitempty"`
	// Duration is the handler's wall time, up to its death if it died.
	Duration time.Duration
}

// DeliveryKind is why the queue handed a job out.
type DeliveryKind string

// Kinds of delivery.
const (
	// First: the job's first delivery.
	First DeliveryKind = "first"
	// Redelivery: the job was handed out again because an earlier
	// delivery was not acked in time: its worker died, or it outlived the
	// queue's visibility timeout.
	Redelivery DeliveryKind = "redelivery"
	// LostAckRedelivery: handed out again because the ack of a delivery
	// that succeeded never reached the queue.
	LostAckRedelivery DeliveryKind = "lost-ack-redelivery"
	// ProducerCopy: a copy the producer enqueued again with the same
	// arguments under a new job ID.
	ProducerCopy DeliveryKind = "producer-copy"
	// Redrive: a person handed the job out again, long after it died.
	Redrive DeliveryKind = "redrive"
	// QueueRetry: the queue's own retry after a failure or a snooze.
	QueueRetry DeliveryKind = "queue-retry"
)
