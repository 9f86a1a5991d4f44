// Package report holds an idempotency report as plain data and renders it:
// a self-contained HTML page, Markdown for a CI job summary, JUnit XML and
// JSON. cmd/twice fills a Report from the records harness.Check writes and
// the events of go test -json; this package knows nothing of either, so
// its model is the report.json schema (SCHEMA.md) and nothing else.
package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/runtwice/twice/harness/result"
)

// SchemaVersion is the version of the report.json format. It changes only
// when a field is removed or changes meaning; new fields keep it. 4: a
// finding's Difference groups findings by their culprits' patterns too,
// and no longer by effects' keys; findings carry their culprits and
// severity. 3: a delivery's steps carry their fate (Step.Fate, every step
// the delivery was granted) where 2 marked the faulted one (Step.Fault).
const SchemaVersion = 4

// Outcome is how a job, one matrix cell or a finding ended, in the words
// of a check's result.Outcome; a job whose check could not run is a
// Problem, not an outcome. report.json calls it "status".
type Outcome = result.Outcome

// Outcomes, from best to worst for a reader.
const (
	// OutcomeIdempotent: every scenario ended in the clean run's state
	// and effects, and the job completed.
	OutcomeIdempotent = result.OutcomeIdempotent
	// OutcomeExpected: not idempotent, as the test says it should be
	// (Config.ExpectFinding, or a test that asserts the finding itself).
	OutcomeExpected = result.OutcomeExpectedFinding
	// OutcomeFlaky: the same schedule gave different verdicts on
	// different runs.
	OutcomeFlaky = result.OutcomeFlaky
	// OutcomeFinding: not idempotent, and nothing said it would be.
	OutcomeFinding = result.OutcomeFinding
)

// Report is one run of twice report. Its JSON form is report.json.
type Report struct {
	// Schema is SchemaVersion.
	Schema int `json:"schema"`
	// Started is when the run began; Duration its wall time.
	Started  time.Time `json:"started"`
	Duration Millis    `json:"duration_ms"`
	// Command is the go test command twice ran; Host the machine.
	Command string `json:"command"`
	Host    string `json:"host"`
	// Twice is the version of twice that wrote the report: its module
	// version and, when its binary records one, the commit it was built
	// from. Shards' reports merge only when they agree on it.
	Twice string `json:"twice,omitempty"`
	// Commit is the git commit of the code under test (HEAD where twice
	// ran), when that is a git checkout. Shards' reports merge only when
	// they agree on it.
	Commit string `json:"commit,omitempty"`
	// RerunOf is the report whose failing schedules this run ran again
	// (twice report -rerun-failed), and nothing else; empty for a run of
	// every schedule.
	RerunOf string `json:"rerun_of,omitempty"`
	// Shard is which shard of the checks this run executed (twice report
	// -shard), or nil for a whole run, and for a merge of shards.
	Shard *Shard `json:"shard,omitempty"`
	// ExitCode is what twice exited with (see Summary).
	ExitCode int `json:"exit_code"`
	// Summary counts jobs by outcome and says why the exit code is what it
	// is.
	Summary Summary `json:"summary"`
	// Faults are the matrix's columns: every fault any job ran, in the
	// order they first appear along Jobs' cells (FaultsOf).
	Faults []string `json:"faults"`
	// Packages are the packages go test ran, sorted by import path.
	Packages []Package `json:"packages"`
	// Jobs are the checked jobs, by package then test.
	Jobs []Job `json:"jobs"`
	// Registries are the services' registries of workers a test checked
	// with harness.CheckRegistered, by package then test: what each
	// registers, and which kinds no sample checked.
	Registries []Registry `json:"registries,omitempty"`
}

// Registry is one registry of workers a test checked (a River workers
// bundle, an asynq ServeMux, a Watermill router).
type Registry struct {
	Package string `json:"package"`
	Test    string `json:"test"`
	// Registry names it: "River workers bundle".
	Registry string `json:"registry"`
	// Kinds are every kind of work it registers.
	Kinds []string `json:"kinds"`
	// Unchecked are the kinds no sample checked: workers without a check.
	Unchecked []string `json:"unchecked,omitempty"`
	// Unregistered are the samples' kinds it does not hold.
	Unregistered []string `json:"unregistered,omitempty"`
}

// AddRegistry adds what harness.CheckRegistered found in a test of pkg,
// once: the shards of a run, or -count runs, each write it.
func (r *Report) AddRegistry(pkg, test string, c result.Coverage) {
	for _, g := range r.Registries {
		if g.Package == pkg && g.Test == test && g.Registry == c.Registry {
			return
		}
	}
	r.Registries = append(r.Registries, Registry{Package: pkg, Test: test, Registry: c.Registry, Kinds: c.Kinds, Unchecked: c.Unchecked, Unregistered: c.Unregistered})
	slices.SortStableFunc(r.Registries, func(a, b Registry) int {
		return cmp.Or(strings.Compare(a.Package, b.Package), strings.Compare(a.Test, b.Test))
	})
}

// WithoutCheckWorkers are the registries that register kinds no sample
// checked.
func (r *Report) WithoutCheckWorkers() []Registry {
	return keep(r.Registries, func(g Registry) bool { return len(g.Unchecked) > 0 })
}

// Shard is one shard of a run split across machines: shard Index of
// Count, counted from 1.
type Shard struct {
	Index int `json:"index"`
	Count int `json:"count"`
}

// String is the shard as -shard takes it: "2/3".
func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.Index, s.Count) }

// Summary counts the report's jobs and problems.
type Summary struct {
	Jobs            int `json:"jobs"`
	Idempotent      int `json:"idempotent"`
	ExpectedFinding int `json:"expected_findings"`
	Flaky           int `json:"flaky"`
	Finding         int `json:"findings"`
	// Errors counts the checks that could not run (harness-error and
	// user-error problems): a job with no verdict, which is not among
	// Jobs.
	Errors int `json:"errors"`
	// Problems are the lines that are not a job's verdict: a package that
	// did not compile, a test binary that crashed, a failing test that
	// ran no check, a package without harness checks. Each message starts
	// with the tag, blame.Tag.
	Problems []Problem `json:"problems,omitempty"`
}

// Problem is one line about something other than a job's verdict.
type Problem struct {
	// Kind is "build-failed", "crashed", "harness-error", "user-error", "test-failed",
	// "no-harness-tests", "no-test-files", "no-package", "go-test" or
	// "clean-runs-disagree".
	Kind string `json:"kind"`
	// Package is the import path it concerns, if any; Test the test.
	Package string `json:"package,omitempty"`
	Test    string `json:"test,omitempty"`
	// Fatal is true when the problem makes the run an infrastructure
	// failure (exit 2) rather than a warning.
	Fatal bool `json:"fatal"`
	// Message says what happened and how to fix it, starting with the
	// tag, blame.Tag.
	Message string `json:"message"`
	// Output is the relevant go test output (compiler errors, the
	// crashed test's last lines), or empty.
	Output string `json:"output,omitempty"`
}

// Package is one package go test ran.
type Package struct {
	ImportPath string `json:"import_path"`
	// Result is go test's: "pass", "fail", "skip" (no test files) or
	// "build-failed".
	Result   string `json:"result"`
	Duration Millis `json:"duration_ms"`
	// Tests counts the tests that ran; Checks the harness checks among
	// them.
	Tests  int `json:"tests"`
	Checks int `json:"checks"`
}

// Job is one harness check: one job checked by one test.
type Job struct {
	// Name is the job's name (harness.Job.Name).
	Name string `json:"name"`
	// Package and Test say where the check ran.
	Package string `json:"package"`
	Test    string `json:"test"`
	// TestPassed is go test's verdict on the test.
	TestPassed bool `json:"test_passed"`
	// Outcome is the job's overall outcome: the worst of its cells.
	Outcome Outcome `json:"status"`
	// Expected is why a finding was expected: Config.ExpectFinding, or a
	// note that the test asserts the finding itself.
	Expected string `json:"expected,omitempty"`
	// Worst is the severity of the job's worst finding; its findings are
	// in that order, the worst first.
	Worst result.Severity `json:"worst,omitempty"`
	// Runs counts how many times the check ran (go test -count).
	Runs int `json:"runs"`
	// Scenarios and Failed count the scenarios of one run; in a shard's
	// report, of that shard.
	Scenarios int `json:"scenarios"`
	Failed    int `json:"failed"`
	// Schedules counts the check's schedules, every shard's together, in
	// a shard's report; 0 otherwise, and for an exploration.
	Schedules int `json:"schedules,omitempty"`
	// Cells are the job's row of the matrix, one per fault it ran, in
	// the order of Report.Faults. A shard's report has a cell for every
	// fault of the check, with 0 scenarios where the shard ran none.
	Cells []Cell `json:"cells"`
	// Steps are what one clean delivery did: SQL statements and effect
	// calls, the fault points.
	Steps []Step `json:"steps"`
	// Volatile are the columns and effect fields left out of every
	// comparison because two clean runs disagreed on them.
	Volatile []string `json:"volatile,omitempty"`
	// VolatileTimes are the Volatile columns that hold a date or time:
	// a handler that fills one from time.Now() instead of the delivery's
	// d.Now makes it volatile, so compared nowhere.
	VolatileTimes []string `json:"volatile_times,omitempty"`
	// Warnings are what the check noticed that is not a verdict, one
	// line each: a handler that returned with a transaction open.
	Warnings []string `json:"warnings,omitempty"`
	// Findings are the scenarios that were not idempotent (or flaky), in
	// the order they ran.
	Findings []Finding `json:"findings,omitempty"`
	// Rerun is the go test command that reruns the check.
	Rerun    string `json:"rerun"`
	Duration Millis `json:"duration_ms"`
}

// Cell is one job x fault entry of the matrix.
type Cell struct {
	Fault   string  `json:"fault"`
	Outcome Outcome `json:"status"`
	// Scenarios and Failed count the fault's schedules and those that
	// were not idempotent.
	Scenarios int `json:"scenarios"`
	Failed    int `json:"failed"`
	// Duration is the wall time of the fault's scenarios in one run.
	Duration Millis `json:"duration_ms"`
}

// Finding is one scenario that was not idempotent.
type Finding struct {
	Fault string `json:"fault"`
	// Schedule is the schedule's short text form; twice replay and
	// -twice.replay take it as it is.
	Schedule string `json:"schedule"`
	// Scenario is the schedule's place among the check's schedules,
	// from 1, the same in a shard's report as in a whole run's.
	Scenario int     `json:"scenario,omitempty"`
	Outcome  Outcome `json:"status"`
	// Difference identifies the finding's problems and diffs: findings
	// of a job with the same Difference differ alike (SameAs).
	Difference string `json:"difference,omitempty"`
	// SameAs is the schedule of an earlier finding of the same job whose
	// state and effect differences are the same as this one's; the
	// differences and the diagram are shown there only.
	SameAs string `json:"same_as,omitempty"`
	// Problems say, one line each, why the scenario is not idempotent
	// beyond the diffs: a delivery that could not complete the job.
	Problems []string `json:"problems,omitempty"`
	// Culprits are who made the difference: the writes and effects past
	// (or short of) what one clean run makes, each with its delivery,
	// step, pattern and fix.
	Culprits []Culprit `json:"culprits,omitempty"`
	// Severity ranks the finding: "effect" (an exactly-once effect made
	// twice, or lost), "money", "state", "time".
	Severity result.Severity `json:"severity,omitempty"`
	// Rerun says, for a flaky finding, what the same schedule did when
	// the check ran it again on a fresh database to confirm it (it was
	// idempotent, or failed another way); empty otherwise.
	Rerun string `json:"rerun,omitempty"`
	// Deliveries are the schedule's deliveries, in start order, with what
	// happened to each.
	Deliveries []Delivery `json:"deliveries"`
	// Order is the interleaving as it happened: for each granted step,
	// the number (from 1) of its delivery.
	Order []int `json:"order,omitempty"`
	// Effects are the effects the scenario's deliveries made, in order.
	Effects []Effect `json:"effects,omitempty"`
	// StateDiff holds the tables whose rows differ from the clean run,
	// each diff go-cmp style (-once +twice).
	StateDiff []TableDiff `json:"state_diff,omitempty"`
	// EffectDiff is how the effects break their policies, (-once +twice),
	// or empty.
	EffectDiff string `json:"effect_diff,omitempty"`
	// Replay is the command that reruns exactly this schedule.
	Replay string `json:"replay"`
	// Database is the connection string of the database kept as
	// evidence, if any.
	Database string `json:"database,omitempty"`
	// Dump is the plain-SQL dump of that database, made when its server
	// stopped with the test binary (local and Docker modes), if any.
	Dump string `json:"dump,omitempty"`
	// DumpError says why that database could not be dumped when its
	// server stopped with the test binary: it is gone.
	DumpError string `json:"dump_error,omitempty"`
}

// Culprit is one write or effect that made a finding's difference
// (result.Culprit), with how go test prints it.
type Culprit struct {
	// Delivery is the delivery's label ("j1a2w2"), and Step its step
	// number; both empty when no granted step matches.
	Delivery string `json:"delivery,omitempty"`
	Step     int    `json:"step,omitempty"`
	// Op is "insert", "update", "delete", "missing insert" (and so on),
	// or for an effect "extra" or "missing".
	Op string `json:"op"`
	// SQL is the statement that wrote the row, or Effect the effect.
	SQL    string `json:"sql,omitempty"`
	Effect string `json:"effect,omitempty"`
	// Table and Row name the row.
	Table string `json:"table,omitempty"`
	Row   string `json:"row,omitempty"`
	// Changes are the columns an update changed.
	Changes []result.Change `json:"changes,omitempty"`
	// Pattern is what the write shows (result.Pattern), and Fix the
	// pattern and its fix in words; both empty when none is recognised.
	Pattern result.Pattern `json:"pattern,omitempty"`
	Fix     string         `json:"fix,omitempty"`
	// Text is the culprit as go test prints it.
	Text string `json:"text"`
}

// TableDiff is how one table differs from the clean run.
type TableDiff struct {
	Table string `json:"table"`
	Diff  string `json:"diff"`
	// Notes explain the diff, one line each: a column whose values differ
	// only by a sequence's gap, and which sequence a rolled-back attempt
	// advanced.
	Notes []string `json:"notes,omitempty"`
}

// Delivery is one delivery of a schedule and what happened to it.
type Delivery struct {
	// Label is "j1a2w2": job 1 (2 and up are producer copies), attempt 2,
	// worker 2.
	Label   string `json:"label"`
	Job     int    `json:"job"`
	Attempt int    `json:"attempt"`
	Worker  int    `json:"worker"`
	// Advance is how far the clock moved just before it started.
	Advance Millis `json:"advance_ms,omitempty"`
	// Late is true for a producer's copy enqueued only as it started
	// (after Advance), not with the original: "late j2a1w2".
	Late bool `json:"late,omitempty"`
	// Waited is how far the clock moved, after Advance, to the job's due
	// time before the queue handed it out (a job scheduled for later).
	Waited Millis `json:"waited_ms,omitempty"`
	// With and After: it started while delivery With (from 1) ran, once
	// that one had taken After steps.
	With  int `json:"with,omitempty"`
	After int `json:"after,omitempty"`
	// Fault is what the schedule did to it, a faults.Kind in its text
	// form (what follows "!" in a schedule), or empty; At the step it
	// acted on (0 for a crash after the last step).
	Fault string `json:"fault,omitempty"`
	At    int    `json:"at,omitempty"`
	// Steps are the steps it was granted, in the order it took them, each
	// with its fate (Step.Fate): Steps[k-1] is its step k, the one At
	// names.
	Steps []Step `json:"steps,omitempty"`
	// Died is true when its worker died (a crash, or a hang past the
	// delivery timeout): its return value was ignored.
	Died bool `json:"died,omitempty"`
	// AckLost is true when it returned nil and its ack never reached the
	// queue.
	AckLost bool `json:"ack_lost,omitempty"`
	// Outcome says what went wrong, as the harness saw it: "crashed
	// before step 3 reached the server: INSERT ...".
	Outcome string `json:"outcome,omitempty"`
	// Err is the error the handler returned, if any.
	Err string `json:"error,omitempty"`
	// QueueRetry marks the clean redelivery the queue made because the
	// schedule's last delivery failed.
	QueueRetry bool `json:"queue_retry,omitempty"`
	// Kind is why the queue handed the job out ("first", "redelivery",
	// "producer-copy"...), set for jobs with a queue adapter.
	Kind string `json:"kind,omitempty"`
	// NotDelivered says why the queue did not hand the job out: the
	// delivery ran no handler.
	NotDelivered string `json:"not_delivered,omitempty"`
	// Settled is what the queue recorded when the handler returned
	// ("completed", "retry: in 1s (attempt 1 of 25)").
	Settled string `json:"settled,omitempty"`
	// Unheld says why a step the schedule held ran as it is.
	Unheld string `json:"unheld,omitempty"`
}

// Step is one step of a delivery: a statement, or a call to an effect.
type Step struct {
	// Text is the statement's SQL, or the effect call as it prints
	// ("email to=a@b subject=...").
	Text string `json:"text"`
	// Effect is the effect's kind ("email") for an effect call, empty for
	// a statement.
	Effect string `json:"effect,omitempty"`
	// Fate is what became of a delivery's step, as the harness recorded
	// it (result.Fate): "ran", "waited-on-lock", "commit-held",
	// "crashed-before", "reply-lost", "crashed-after", "timed-out",
	// "refused" or "unfinished". Empty in Job.Steps, the clean run's.
	Fate result.Fate `json:"fate,omitempty"`
}

// Effect is one call to a system outside the database.
type Effect struct {
	Kind string `json:"kind"`
	// Text is how the effect prints: kind, key and payload fields.
	Text string `json:"text"`
	// Delivery is the label of the delivery that made it.
	Delivery string `json:"delivery"`
	// Result is what the provider answered worth keeping (a payment ID);
	// Err the error it returned; Replayed is true when it answered from
	// its idempotency store.
	Result   string `json:"result,omitempty"`
	Err      string `json:"error,omitempty"`
	Replayed bool   `json:"replayed,omitempty"`
	// ReplyLost is true when the provider made the effect but its answer
	// never reached the handler, whose call returned a timeout error.
	ReplyLost bool `json:"reply_lost,omitempty"`
}

// Millis is a duration written as whole milliseconds in JSON.
type Millis int64

// Ms converts a duration.
func Ms(d time.Duration) Millis { return Millis(d / time.Millisecond) }

// Duration converts back.
func (m Millis) Duration() time.Duration { return time.Duration(m) * time.Millisecond }
