// Package result holds what a twice check learns about a job, as values:
// the Result that harness.Check, harness.Run and harness.Explore return,
// its Scenarios, each delivery's DeliveryOutcome and the fate of every
// step a delivery took (StepTaken, Fate). The twice runner reads the same
// values back from the files a check writes, so every surface (a test's
// failure message, report.json, the HTML report's diagrams) reads one
// fact, and nothing parses text made from it.
//
// The package imports nothing from harness but the leaf package
// harness/queue, for the kind of a delivery: a program that only reads
// results (cmd/twice) links no PostgreSQL provider.
package result

import (
	"time"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/queue"
)

// Outcome is how a whole check ended, over all its scenarios and
// including checks that could not run; a Verdict is how one scenario
// ended. A check's Outcome follows from its scenarios' Verdicts (one
// NotIdempotent makes it OutcomeFinding, or OutcomeExpectedFinding) but
// has words a Verdict does not: a check that could not run, or whose
// finding was expected. The twice runner's report uses the same words
// for a job, a matrix cell and a finding.
type Outcome string

// Outcomes of a check.
const (
	// OutcomeIdempotent: every scenario was idempotent.
	OutcomeIdempotent Outcome = "idempotent"
	// OutcomeFinding: some scenario was not idempotent, and nothing said
	// so before.
	OutcomeFinding Outcome = "finding"
	// OutcomeExpectedFinding: some scenario was not idempotent, as
	// harness.Config.ExpectFinding says.
	OutcomeExpectedFinding Outcome = "expected-finding"
	// OutcomeFlaky: one schedule gave different verdicts on different
	// runs (a failing scenario's confirming rerun did not fail the same
	// way, or Explore's reruns disagreed), and no scenario failed the
	// same way twice.
	OutcomeFlaky Outcome = "flaky"
	// OutcomeInternalError: the check itself could not run (no
	// PostgreSQL, a broken setup, a comparer that panics); it says
	// nothing of the job.
	OutcomeInternalError Outcome = "internal-error"
	// OutcomeUserError: the check could not run because of the user's
	// code or configuration (a handler or worker factory that fails on
	// the clean run, a setup step that fails, input that means nothing);
	// it says nothing of the job's idempotency, and nothing of twice.
	OutcomeUserError Outcome = "user-error"
)

// Verdict is how one scenario ended: one schedule on one fresh database.
// A whole check's is its Outcome.
type Verdict string

// Verdicts of a scenario.
const (
	// Idempotent: the scenario ended in the reference state and the job
	// completed.
	Idempotent Verdict = "idempotent"
	// NotIdempotent: the state or the effects differ from the reference,
	// or the job could not complete.
	NotIdempotent Verdict = "not-idempotent"
	// Flaky: the scenario's schedule, run again on a fresh database to
	// confirm it (Scenario.Rerun), did not end the same way: it failed
	// and then passed or failed another way, or, after a race
	// (Scenario.Races), passed and then failed. The handler or the run
	// depends on chance or timing, so neither run's verdict is trusted,
	// and the check does not pass.
	Flaky Verdict = "flaky"
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
	// StoredResultChanged: the scenario wrote a row more often than a
	// clean run does, and the writes past the clean run's changed a
	// value the row held after them (Problem.Table, Row, Column, Before,
	// After): a retry changed a stored result. The column differs between
	// two clean runs (time.Now(), a per-process counter), so the state
	// diff leaves it out; the write history shows the retry changed it.
	StoredResultChanged ProblemKind = "stored-result-changed"
	// WorkAfterAck: a goroutine the handler started ran statements or
	// made effect calls after the handler returned (Problem.Delivery,
	// Problem.Calls). The queue acks a delivery when its handler returns,
	// so that work is unacked: a crash then loses it, and nothing
	// redelivers the job.
	WorkAfterAck ProblemKind = "work-after-ack"
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
	// Row is the primary key of a StoredResultChanged problem's row (its
	// columns' values joined with ","), Column its column, and Before and
	// After the column's value, as JSON, after the writes a clean run
	// makes and after the scenario's last.
	Row    string `json:",omitempty"`
	Column string `json:",omitempty"`
	Before string `json:",omitempty"`
	After  string `json:",omitempty"`
	// Delivery is the delivery that did a WorkAfterAck problem's work
	// ("j1a1w1"), and Calls the statements and effect calls it made
	// after its handler returned, in order.
	Delivery string   `json:",omitempty"`
	Calls    []string `json:",omitempty"`
}

// Result is everything one check learned about a job.
type Result struct {
	// Job is the job's name.
	Job string
	// Outcome is how the check ended. Its JSON key stays "Status", the
	// key records and the tools that read them have always used.
	Outcome Outcome `json:"Status"`
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
	Shard *ShardRun `json:",omitempty"`

	// Reductions say, for each concurrent fault whose interleavings the
	// partial-order reduction thinned, and for each crash fault whose
	// crash points were run one per class (faults.CrashClass), how many
	// schedules it left out and whether it had to run them after all.
	Reductions []Reduction `json:",omitempty"`
	// Overlap is, when the job's step times were declared
	// (harness.Config.StepTimes) and visibility-timeout is among the
	// check's faults, where its first delivery is when the
	// queue gives up on it: the only step visibility-timeout pauses it
	// at, or none when it has returned by then. nil when they were not
	// declared, and visibility-timeout pauses it at every step.
	Overlap *faults.Overlap `json:",omitempty"`
	// ExpectFinding is Config.ExpectFinding: the reason the job is known
	// not to be idempotent, or empty.
	ExpectFinding string
	// Duration is the wall time of the whole run.
	Duration time.Duration
	// Warnings are what the check noticed that is not a verdict: a
	// handler may pass and still do it.
	Warnings []Warning `json:",omitempty"`
}

// WarningKind says what a Warning is about.
type WarningKind string

// Kinds of warning.
const (
	// TransactionLeftOpen: a handler returned without an error while one
	// of its connections was still in a transaction (a Begin without
	// Commit or Rollback on some path), or it closed one inside a
	// transaction (pgxpool closes a connection given back inside one).
	// The harness rolled it back, as a worker's pool would only by luck;
	// the work it did there is work the handler believes it did. It is
	// decided from the transaction status the client itself had, from
	// its last reply, when the handler returned: never from timing.
	TransactionLeftOpen WarningKind = "transaction-left-open"
	// NoStepTaken: a delivery ran its handler to the end without a
	// statement through the delivery's connections or an effect through
	// its fakes, though the clean run took steps. If it did its work
	// through a pool or client of its own, the harness saw none of it:
	// no fault reached it, no state of it was compared, and it may have
	// written to a database the harness did not create.
	NoStepTaken WarningKind = "no-step-taken"
	// CleanRunsDisagree: the check's clean reference runs of the job
	// differed in a way no volatile column explains: a table holds another
	// number of rows, an effect kind happened another number of times, or
	// the steps differ (other statements or effect calls, not only the
	// same ones in another order). The handler does not do the same
	// thing twice on the same input (a counter kept across calls, a
	// random or wall-clock branch), so the reference is one of several
	// outcomes and whatever differed was left out of every comparison as
	// volatile: a pass says little. Disagreement says how the runs
	// differed.
	CleanRunsDisagree WarningKind = "clean-runs-disagree"
	// ConnectionLeftOpen: a handler returned while a connection it opened
	// itself on Delivery.DSN (not the delivery's pool d.DB or d.SQL()) was
	// still open. The harness closed it; in production it stays open until
	// the process exits, one more for every job.
	ConnectionLeftOpen WarningKind = "connection-left-open"
	// GoroutineOutlived: a goroutine the handler started from the user's
	// code was still running 5s after the handler returned, when the
	// harness stopped watching the delivery's connections and effects:
	// what it did later was not checked (see WorkAfterAck). Connections
	// counts the first delivery's goroutines.
	GoroutineOutlived WarningKind = "goroutine-outlived"
)

// Warning is something a check noticed that is not a verdict.
type Warning struct {
	Kind WarningKind
	// Deliveries counts the deliveries it happened in.
	Deliveries int
	// First is the first such delivery, and Schedule the schedule it ran
	// in.
	First    faults.Scheduled
	Schedule faults.Schedule
	// Connections counts the first delivery's connections it concerns
	// (TransactionLeftOpen).
	Connections int `json:",omitempty"`
	// CleanSteps is how many steps the clean run took (NoStepTaken).
	CleanSteps int `json:",omitempty"`
	// Disagreement is how the clean runs differed (CleanRunsDisagree).
	Disagreement *Disagreement `json:",omitempty"`
}

// Disagreement is how two clean reference runs of a job differed beyond
// volatile columns and effect fields.
type Disagreement struct {
	// Rows are the tables whose number of rows differs between the runs.
	Rows []RunCounts `json:",omitempty"`
	// Effects are the effect kinds that happened a different number of
	// times.
	Effects []RunCounts `json:",omitempty"`
	// Steps counts each run's steps, and StepAt is the first step (from 1)
	// that differs: another statement text, or another effect kind. Both
	// are zero when the steps agree.
	Steps  [2]int `json:",omitzero"`
	StepAt int    `json:",omitempty"`
}

// RunCounts is how many of something (a table's rows, an effect kind's
// effects) each of two clean runs had.
type RunCounts struct {
	Name string
	Runs [2]int
}

// Idempotent reports whether every scenario was idempotent.
func (r *Result) Idempotent() bool { return len(r.Failed()) == 0 }

// Worst is the severity of r's worst finding, or SeverityNone.
func (r *Result) Worst() Severity {
	worst := SeverityNone
	for _, sc := range r.Failed() {
		worst = max(worst, sc.Severity)
	}
	return worst
}

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
	// (queue.Rules.OneDeliveryAtATime), so it refuses the second
	// delivery whatever the order; the rest the partial-order reduction
	// left out.
	Refused int `json:",omitempty"`
	// HandedOut is a scenario whose second delivery the queue handed out
	// all the same; the Refused orders then ran too, after the others.
	// nil when the queue refused it.
	HandedOut *faults.Schedule `json:",omitempty"`
	// Classes are, for crash-mid-job and redrive, the runs of crash
	// points that end in the same state (no commit point or effect call
	// between them), each run once: Orders counts the crash points run,
	// Pruned those left out. Diverged, then, is the representative's
	// first delivery taking, inside its class, another step than the
	// clean run did; the crash points left out ran too.
	Classes []faults.CrashClass `json:",omitempty"`
	// Pauses are, for visibility-timeout, the runs of pause points inside
	// one transaction run from their first (faults.PauseClass): Orders
	// counts the pause points run, Pruned those left out. Unwaited is the
	// first representative whose second delivery did not wait on the
	// first one's locks as the class assumes; the pause points left out
	// then ran too. nil when every one did.
	Pauses   []faults.PauseClass `json:",omitempty"`
	Unwaited *faults.Schedule    `json:",omitempty"`
}

// Divergence is a delivery of a reduced scenario that took, at a
// position the reduction treated as free, a step that is not local, or
// no step at all, or that ended right after it.
type Divergence struct {
	// Schedule is the scenario's schedule.
	Schedule faults.Schedule
	// Delivery is the delivery, 1-based, as in Schedule.Order; At the
	// position, 1-based, among the steps it asked for.
	Delivery int
	At       int
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
	// Culprits are the writes that made a differing table differ: rows
	// the scenario's deliveries wrote past what one clean run writes,
	// each with the delivery and step that wrote it (culprit.go).
	Culprits []Culprit `json:",omitempty"`
	// Severity ranks the scenario's finding (SeverityNone when it has
	// none).
	Severity Severity `json:",omitempty"`
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
	// Races are the choices the executor made by timing, not by the
	// schedule, while the scenario ran. A scenario with any is run again
	// whichever way it went (Rerun): one run says little when the next
	// may go the other way.
	Races []Race `json:",omitempty"`
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
	// the test has exited, and Database no longer answers. nil when it
	// was dumped, or needed no dump.
	DumpError *Error `json:",omitempty"`
	// Rerun is the same schedule run again on a fresh database, to
	// confirm a scenario that was not idempotent, or that raced (Races),
	// before the check reports it: a failing one whose rerun has the
	// same problems stays NotIdempotent, a passing one whose rerun
	// passes stays Idempotent; otherwise the Verdict is Flaky. nil for a
	// scenario that passed with no race (it is not run again).
	Rerun *Rerun `json:",omitempty"`
	// Duration is the wall time of fresh state, deliveries, snapshot and
	// diff.
	Duration time.Duration
}

// Race is a choice the executor made by timing, not by the schedule:
// which of two things that happened at once it took first. The same
// schedule may take the other way on another run.
type Race struct {
	// Kind says what raced.
	Kind RaceKind
	// Delivery is the delivery the choice went to or concerned, 1-based
	// as in faults.Schedule.Order; Other the one it raced with (0 for a
	// timer).
	Delivery int
	Other    int `json:",omitempty"`
	// Step is Delivery's step, 1-based, the choice was about; 0 when it
	// was about no step (a return).
	Step int `json:",omitempty"`
}

// RaceKind says what raced.
type RaceKind string

// Kinds of race.
const (
	// StepBeside: a step was granted while another delivery's step was
	// still in flight (waiting on a lock another session may let go of,
	// or applied with its reply lost): which of the two the server runs
	// first is not the executor's to say. A step granted to the delivery
	// whose lock the other waits on alone is none, unless it may let the
	// lock go and run on, or comes to wait on a lock itself.
	StepBeside RaceKind = "step-beside"
	// TimerFired: a wall-clock limit decided: a cancelled delivery's
	// grace ran out before it reacted, a delivery ran past
	// harness.Config.DeliveryTimeout, or a handler stopped waiting for a
	// step the schedule held (an HTTP client's timeout).
	TimerFired RaceKind = "timer-fired"
	// GrantCrossed: a step was granted as its requester stopped waiting
	// for it (its context ended): the requester saw the one that came
	// first.
	GrantCrossed RaceKind = "grant-crossed"
	// ReturnsRaced: two deliveries' handlers had returned when the
	// executor took the first return; which one the queue heard first is
	// the order they came in.
	ReturnsRaced RaceKind = "returns-raced"
	// SettledBeside: a queue operation (a fetch, an ack) ran while
	// another delivery's handler, which settles its delivery with the
	// queue itself (queue.Rules.HandlerSettles: a Kafka handler that
	// commits its offset), was running: whether that handler had
	// settled yet, which the operation may read, was timing.
	SettledBeside RaceKind = "settled-beside"
)

// Rerun is what a scenario's schedule did when run again on a fresh
// database: one that failed, or one that raced (Scenario.Races).
type Rerun struct {
	// Verdict is the rerun's own verdict: Idempotent or NotIdempotent.
	Verdict Verdict
	// Problems say why the rerun was not idempotent.
	Problems []Problem `json:",omitempty"`
	// Order is the interleaving as it happened in the rerun.
	Order []int `json:",omitempty"`
	// Deliveries are the rerun's deliveries as they ran.
	Deliveries []DeliveryOutcome `json:",omitempty"`
	// Races are the rerun's races (Scenario.Races).
	Races []Race `json:",omitempty"`
}

// Confirmed reports whether some scenario failed, and failed the same
// way when run again: a finding, not chance.
func (r *Result) Confirmed() bool {
	for _, s := range r.Scenarios {
		if s.Verdict == NotIdempotent {
			return true
		}
	}
	return false
}

// DeliveryOutcome is what one delivery did.
type DeliveryOutcome struct {
	// Delivery is the delivery as scheduled (a queue's retry after a
	// failure is added by the harness).
	Delivery faults.Scheduled
	// JobID and Attempt are what the handler was given; Worker numbers
	// the worker that ran it.
	JobID   string
	Attempt int
	Worker  int
	// Fault says in words what went wrong by design (the step it hit
	// carries the same fact as a value, StepTaken.Fate): "crashed before step 3
	// reached the server: INSERT ...", "returned nil, but its ack was
	// lost", "lost the answer to step 2, which the provider made; the
	// call timed out: ...". A delivery an effect fault hit lives on, so
	// Err may follow.
	Fault string
	// Err is the error the handler returned, or empty. A delivery that
	// crashed has none: its return value is ignored.
	Err string
	// Panic is what the handler panicked with, and where, when it did
	// (Err then says it too): the scenario stopped there, since a
	// handler that panics is a finding whatever else happens.
	Panic *Panic `json:",omitempty"`
	// Steps are the steps the delivery was granted, in the order it asked
	// for them, each with its fate: Steps[k-1] is its step k (the place
	// Delivery.At names), and the delivery's entries of Scenario.Order
	// are these, in order. A redelivery that found the job done takes
	// fewer than the clean run.
	Steps []StepTaken `json:",omitempty"`
	// QueueRetry marks the clean redelivery the queue made because the
	// job's last scheduled delivery failed (or, with a queue adapter,
	// because the queue still held the job: a retry, a snooze).
	QueueRetry bool
	// Kind is why the queue handed the job out this time.
	Kind queue.DeliveryKind `json:",omitempty"`
	// NotDelivered says why the queue did not hand the job out for this
	// delivery (a producer copy refused as a duplicate, a job already
	// completed or still held by another attempt); empty when it did. A
	// delivery that was not made ran no handler: it is never "handled".
	NotDelivered string `json:",omitempty"`
	// QueueDone, with NotDelivered, says the queue held the job finished
	// (acked, completed, its offset committed) and hands it out no more
	// (queue.Fetched.Done).
	QueueDone bool `json:",omitempty"`
	// Settled is what the queue recorded when the handler returned
	// ("completed", "retry in 1s", "snoozed for 5m0s"); empty when nothing
	// was recorded (the worker died, the ack was lost) or the job has no
	// queue adapter.
	Settled string `json:",omitempty"`
	// Unheld says why a step the schedule held (Schedule.Holds) ran
	// without its commit held: "step 2 ran as it is: VACUUM cannot run
	// inside a transaction block"; empty when every hold took.
	Unheld string `json:",omitempty"`
	// Died is true when the delivery's worker died: it crashed (before a
	// step, right after an effect, or after its last step before the
	// ack) or hung past harness.Config.DeliveryTimeout. Its return value
	// was ignored and the worker discarded.
	Died bool `json:",omitempty"`
	// AckLost is true when the handler returned nil and its ack never
	// reached the queue (a lost-ack fault); the worker lived on.
	AckLost bool `json:",omitempty"`
	// Waited is how far the harness clock moved, after the schedule's
	// Advance, to the job's due time before the queue handed it out: a
	// job scheduled for later (asynq's ProcessIn, River's ScheduledAt,
	// gue's RunAt; queue.Fetched.DueAt) runs when it is due. Zero for a
	// job that was due.
	Waited time.Duration `json:",omitempty"`
	// AfterReturn are the statements and effect calls a goroutine the
	// handler left running made after the handler returned (the
	// scenario's WorkAfterAck problem), in order.
	AfterReturn []string `json:",omitempty"`
	// Duration is the handler's wall time, up to its death if it died.
	Duration time.Duration
}

// Panic is a handler's panic: the value it panicked with and the stack of
// its goroutine from the panic's site down.
type Panic struct {
	Value string
	Stack string
}

// Coverage is what a check of a service's registered workers found
// (harness.CheckRegistered): the kinds of work its registry holds, and
// those no sample job checked.
type Coverage struct {
	// Registry names what the kinds were read from: "River workers
	// bundle", "asynq ServeMux", "Watermill router".
	Registry string
	// Kinds are every kind the registry holds, sorted: River job kinds,
	// asynq patterns, Watermill handler names.
	Kinds []string
	// Unchecked are the registered kinds no sample checked.
	Unchecked []string `json:",omitempty"`
	// Unregistered are the kinds of samples the registry does not hold:
	// production would never work them.
	Unregistered []string `json:",omitempty"`
}
