// Package render makes the words of a finding from typed results: the
// message Check and Explore fail a test with, and the problem lines the
// twice runner puts in its reports. Every surface prints what this
// package writes, so a finding reads the same everywhere, and nothing
// downstream parses it back. The words carry no tag (blame.Tag): the edge
// that shows them (harness's testing.TB wrapper, the twice runner) adds
// it once, through internal/blame, so a finding quoted in another
// message is not tagged twice.
package render

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/text"
)

// Step shows a step on one line: a statement with its white space folded
// and cut at 120 characters, an effect call as "effect: email to=...".
func Step(s faults.Step) string {
	if s.IsEffect() {
		return "effect: " + text.OneLine(s.SQL)
	}
	return text.OneLine(s.SQL)
}

// TestPattern is the go test -run pattern that matches exactly the named
// test (or subtest: "TestX/case").
func TestPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// Problem is one problem in words: "table \"orders\" differs from one
// clean run", "the job did not complete: ...".
func Problem(p result.Problem) string {
	switch p.Kind {
	case result.StateDiffers:
		return fmt.Sprintf("table %q differs from one clean run", p.Table)
	case result.EffectsDiffer:
		return fmt.Sprintf("effects differ from one clean run: %d missing, %d extra", p.Missing, p.Extra)
	case result.DidNotComplete:
		return "the job did not complete: " + p.Detail
	case result.NotDelivered:
		return "the job was never delivered: " + p.Detail
	case result.Internal:
		return blame.KindInternal.Label() + p.Detail
	case result.StoredResultChanged:
		return fmt.Sprintf("table %q row %s: a retry changed a stored result: %s was %s after the writes a clean run makes, and %s after the scenario's last (the column differs between two clean runs, so the state diff leaves it out; the write history shows the retry rewrote it)",
			p.Table, p.Row, p.Column, p.Before, p.After)
	case result.WorkAfterAck:
		return workAfterAck(p)
	}
	return fmt.Sprintf("%s: %s", p.Kind, p.Detail)
}

// Problems are the lines of s's problems that its diffs do not show: a
// table that differs is shown by its diff, effects by the effect diff.
func Problems(s result.Scenario) []string {
	var out []string
	for _, p := range s.Problems {
		if p.Kind != result.StateDiffers {
			out = append(out, text.FirstLine(Problem(p)))
		}
	}
	return out
}

// Difference is what makes two scenarios' findings the same: their
// problems, diffs and culprits' patterns, not their schedules,
// deliveries, the fault named in a diff's header or an effect's key.
func Difference(s result.Scenario) string {
	var b strings.Builder
	if s.Verdict == result.Flaky {
		b.WriteString("flaky\n")
		if len(s.Problems) == 0 && s.Rerun != nil {
			// It passed first: what tells it apart is how its rerun failed.
			for _, p := range s.Rerun.Problems {
				fmt.Fprintf(&b, "rerun %s\n", text.FirstLine(Problem(p)))
			}
		}
	}
	for _, p := range Problems(s) {
		fmt.Fprintf(&b, "%s\n", p)
	}
	for _, d := range s.StateDiff {
		fmt.Fprintf(&b, "%q\n%s\n", d.Table, d.Diff)
		for _, g := range d.Gaps {
			fmt.Fprintf(&b, "%s\n", g)
		}
	}
	if s.EffectDiff != nil {
		// By kind and payload, not as printed: a key drawn at random
		// (stripe-go's, a per-attempt key) differs in every scenario.
		for _, l := range s.EffectDiff.Lines {
			fmt.Fprintf(&b, "%s %s %s\n", l.Op, l.Effect.Kind, l.Effect.Payload)
		}
	}
	for _, c := range s.Culprits {
		fmt.Fprintf(&b, "culprit %s\n", c.Pattern)
	}
	return b.String()
}

// written is what a finding's earlier paragraphs said: the patterns
// whose fix they gave, and each table diff they printed, by its rows,
// with the name of the paragraph that printed it.
type written struct {
	fixes  map[result.Pattern]bool
	tables map[string]string
}

// diffs writes s's problems, culprits and diffs, named name; a fix or a
// table diff an earlier paragraph wrote (w) is pointed to, not written
// again. The effects' count is their diff's to say.
func diffs(b *strings.Builder, s result.Scenario, name string, w written) {
	for _, p := range s.Problems {
		if p.Kind != result.StateDiffers && (p.Kind != result.EffectsDiffer || s.EffectDiff == nil) {
			fmt.Fprintf(b, "  %s\n", text.FirstLine(Problem(p)))
		}
	}
	for _, line := range Culprits(s.Culprits, w.fixes) {
		fmt.Fprintf(b, "  %s\n", line)
	}
	for _, d := range s.StateDiff {
		rows := strings.Join(append([]string{d.Table, d.Diff}, gapLines(d)...), "\n")
		if first, ok := w.tables[rows]; ok {
			fmt.Fprintf(b, "table %q differs as under %s above\n", d.Table, first)
			continue
		}
		w.tables[rows] = name
		fmt.Fprintf(b, "%s\n", d)
	}
	if s.EffectDiff != nil {
		fmt.Fprintf(b, "%s\n", s.EffectDiff)
	}
}

// gapLines are d's gaps as printed.
func gapLines(d assert.TableDiff) []string {
	var out []string
	for _, g := range d.Gaps {
		out = append(out, g.String())
	}
	return out
}

// Group is the scenarios (indexes into the slice given to Groups) that
// showed one difference, in order.
type Group []int

// Groups gathers scenarios with the same Difference, in the order each
// difference first appeared.
func Groups(scenarios []result.Scenario) []Group {
	var out []Group
	at := map[string]int{}
	for i, s := range scenarios {
		d := Difference(s)
		if g, ok := at[d]; ok {
			out[g] = append(out[g], i)
			continue
		}
		at[d] = len(out)
		out = append(out, Group{i})
	}
	return out
}

// Name is a scenario as a reader finds it: "crash-before-ack (schedule
// j1a1w1!crash > +30s j1a2w2)".
func Name(s result.Scenario) string {
	return fmt.Sprintf("%s (schedule %s)", s.Fault, s.Schedule)
}

// Deliveries are the lines saying what went wrong in each of s's
// deliveries, by design or by the handler.
func Deliveries(s result.Scenario) []string {
	var out []string
	for _, d := range s.Deliveries {
		label := d.Delivery.Label()
		switch {
		case d.NotDelivered != "":
			out = append(out, fmt.Sprintf("%s was not delivered: %s", label, d.NotDelivered))
		case d.Fault != "" && d.Err != "":
			out = append(out, fmt.Sprintf("%s %s, then returned an error: %s", label, d.Fault, text.FirstLine(d.Err)))
		case d.Fault != "":
			out = append(out, fmt.Sprintf("%s %s", label, d.Fault))
		case d.Err != "":
			out = append(out, fmt.Sprintf("%s returned an error: %s", label, text.FirstLine(d.Err)))
		}
		if d.Unheld != "" {
			out = append(out, fmt.Sprintf("%s was not held where the schedule says: %s", label, d.Unheld))
		}
		if d.Waited > 0 && d.NotDelivered == "" {
			out = append(out, fmt.Sprintf("%s ran once its job was due, the clock moved +%s to it", label, faults.FormatDuration(d.Waited)))
		}
	}
	return out
}

// maxListed bounds the schedules named per fault in a group's "same
// difference" line; the rest are counted.
const maxListed = 3

// Findings writes the failed scenarios of res, one block per distinct
// difference: the first scenario that showed it with its deliveries, the
// difference, then the other schedules that gave the same, one line per
// fault. The volatile columns follow.
func Findings(b *strings.Builder, res *result.Result, failed []result.Scenario) {
	failed = panics(b, failed)
	groups := Groups(failed)
	// The worst first: a double charge before a moved timestamp.
	slices.SortStableFunc(groups, func(x, y Group) int { return cmp.Compare(failed[y[0]].Severity, failed[x[0]].Severity) })
	w := written{fixes: map[result.Pattern]bool{}, tables: map[string]string{}}
	for _, g := range groups {
		first := failed[g[0]]
		fmt.Fprintf(b, "\n%s:\n", Name(first))
		for _, l := range Deliveries(first) {
			fmt.Fprintf(b, "  %s\n", l)
		}
		diffs(b, first, Name(first), w)
		if l := Rerun(first); l != "" {
			fmt.Fprintf(b, "%s\n", l)
		}
		if len(g) > 1 {
			fmt.Fprintf(b, "the same difference under %d more %s:\n", len(g)-1, text.Plural(len(g)-1, "schedule"))
			more := make([]result.Scenario, 0, len(g)-1)
			for _, i := range g[1:] {
				more = append(more, failed[i])
			}
			schedules(b, more)
		}
	}
	if len(res.Volatile) > 0 {
		fmt.Fprintf(b, "\nleft out as volatile (they differ between two clean runs): %s\n", strings.Join(res.Volatile, ", "))
	}
}

// schedules lists scenarios' schedules, by fault, a few of each.
func schedules(b *strings.Builder, scenarios []result.Scenario) {
	var names []faults.Name
	byFault := map[faults.Name][]string{}
	for _, s := range scenarios {
		if _, ok := byFault[s.Fault]; !ok {
			names = append(names, s.Fault)
		}
		byFault[s.Fault] = append(byFault[s.Fault], s.Schedule.String())
	}
	for _, f := range names {
		scheds := byFault[f]
		shown := scheds[:min(len(scheds), maxListed)]
		line := strings.Join(shown, "; ")
		if rest := len(scheds) - len(shown); rest > 0 {
			line += fmt.Sprintf("; and %d more", rest)
		}
		if len(scheds) > 1 {
			fmt.Fprintf(b, "  %s, %d schedules: %s\n", f, len(scheds), line)
		} else {
			fmt.Fprintf(b, "  %s: %s\n", f, line)
		}
	}
}

// panics writes one paragraph per value a handler panicked with in the
// failed scenarios (a panic is the finding, whatever the scenario's
// other deliveries and state show): where it first happened, its stack
// once, and the other schedules it happened in. It returns the failed
// scenarios without a panic, for the usual paragraphs.
func panics(b *strings.Builder, failed []result.Scenario) []result.Scenario {
	var rest []result.Scenario
	var values []string
	type seen struct {
		first    result.Scenario
		delivery result.DeliveryOutcome
		more     []result.Scenario
	}
	byValue := map[string]*seen{}
	for _, s := range failed {
		i := slices.IndexFunc(s.Deliveries, func(d result.DeliveryOutcome) bool { return d.Panic != nil })
		if i < 0 || s.Verdict == result.Flaky {
			rest = append(rest, s)
			continue
		}
		d := s.Deliveries[i]
		if p := byValue[d.Panic.Value]; p != nil {
			p.more = append(p.more, s)
			continue
		}
		values = append(values, d.Panic.Value)
		byValue[d.Panic.Value] = &seen{first: s, delivery: d}
	}
	for _, v := range values {
		p := byValue[v]
		fmt.Fprintf(b, "\nthe handler panicked: %s\n", v)
		fmt.Fprintf(b, "  first in %s, delivery %s (attempt %d); the scenario stopped there: a handler that panics is a finding whatever its other deliveries and the queue's retries do\n",
			Name(p.first), p.delivery.Delivery.Label(), p.delivery.Attempt)
		if p.delivery.Panic.Stack != "" {
			fmt.Fprintf(b, "  stack from the panic:\n")
			for _, l := range strings.Split(p.delivery.Panic.Stack, "\n") {
				fmt.Fprintf(b, "    %s\n", l)
			}
		}
		if len(p.more) > 0 {
			fmt.Fprintf(b, "the same panic under %d more %s:\n", len(p.more), text.Plural(len(p.more), "schedule"))
			schedules(b, p.more)
		}
	}
	return rest
}

// Rerun says what a flaky scenario's confirming rerun did, or nothing
// for a scenario that is not flaky.
func Rerun(s result.Scenario) string {
	switch {
	case s.Verdict != result.Flaky || s.Rerun == nil:
		return ""
	case s.Rerun.Verdict == result.Idempotent:
		return "flaky: run again on a fresh database, the same schedule was idempotent, so this is not a finding but a handler that depends on chance or timing"
	}
	var ps []string
	for _, p := range s.Rerun.Problems {
		ps = append(ps, text.FirstLine(Problem(p)))
	}
	if len(s.Problems) == 0 {
		return fmt.Sprintf("flaky: it passed, but %s, and run again on a fresh database the same schedule failed: %s",
			Races(s.Races), strings.Join(ps, "; "))
	}
	return "flaky: run again on a fresh database, the same schedule failed another way: " + strings.Join(ps, "; ")
}

// Races says in words what the executor decided by timing in a run: why
// a pass was run again.
func Races(rs []result.Race) string {
	if len(rs) == 0 {
		return "the executor decided nothing by timing"
	}
	var ws []string
	for _, r := range rs {
		ws = append(ws, race(r))
	}
	return "the executor decided by timing: " + strings.Join(ws, "; ")
}

func race(r result.Race) string {
	switch r.Kind {
	case result.StepBeside:
		return fmt.Sprintf("step %d of delivery %d was granted while a step of delivery %d was still in flight", r.Step, r.Delivery, r.Other)
	case result.TimerFired:
		return fmt.Sprintf("a wall-clock limit ran out on delivery %d before it reacted or took its turn", r.Delivery)
	case result.GrantCrossed:
		return fmt.Sprintf("step %d of delivery %d was granted as its caller stopped waiting for it", r.Step, r.Delivery)
	case result.ReturnsRaced:
		return fmt.Sprintf("deliveries %d and %d had both returned when the first return was taken", r.Delivery, r.Other)
	case result.SettledBeside:
		return fmt.Sprintf("the queue handed out or settled delivery %d while the handler of delivery %d, which settles with the queue itself, was running", r.Delivery, r.Other)
	}
	return string(r.Kind)
}

// Finding is the message Check fails a test with: every failed scenario
// of res, grouped by difference, then the line that reruns the test.
func Finding(res *result.Result, rerun string) string {
	failed := res.Failed()
	var b strings.Builder
	if res.Outcome == result.OutcomeFlaky && passedFirst(failed) {
		fmt.Fprintf(&b, "flaky: job %q: %d of %d scenarios%s did not end the same way when run again on a fresh database (some passed, then failed), so the check does not pass: the handler or the run depends on chance or timing\n",
			res.Job, len(failed), len(res.Scenarios), InShard(res))
	} else if res.Outcome == result.OutcomeFlaky {
		fmt.Fprintf(&b, "flaky: job %q: %d of %d scenarios%s failed, and not the same way when run again on a fresh database, so the check does not pass: the handler depends on chance or timing\n",
			res.Job, len(failed), len(res.Scenarios), InShard(res))
	} else {
		b.WriteString(Headline(res) + "\n")
	}
	Findings(&b, res, failed)
	fmt.Fprintf(&b, "\nrerun: %s", rerun)
	return b.String()
}

// passedFirst reports whether a flaky scenario of failed passed on its
// first run and failed on its rerun.
func passedFirst(failed []result.Scenario) bool {
	return slices.ContainsFunc(failed, func(s result.Scenario) bool {
		return s.Verdict == result.Flaky && len(s.Problems) == 0
	})
}

// Headline is the first line of a finding's message: how many scenarios
// differ, and the worst of what they show.
func Headline(res *result.Result) string {
	failed := res.Failed()
	line := fmt.Sprintf("not idempotent: job %q: %d of %d scenarios%s differ from one clean run", res.Job, len(failed), len(res.Scenarios), InShard(res))
	if w := Severity(res.Worst()); w != "" {
		line += "; worst: " + w
	}
	return line
}

// Severity says what a severity means: "an effect made twice or lost".
func Severity(s result.Severity) string {
	switch s {
	case result.SeverityEffect:
		return "an effect made twice or lost"
	case result.SeverityMoney:
		return "a changed amount"
	case result.SeverityState:
		return "a changed value"
	case result.SeverityTime:
		return "changed timestamps only"
	}
	return ""
}

// InShard says, after a count of res's scenarios, which shard they are
// when the check ran as one shard of several: " in shard 2/3 (of 40)".
func InShard(res *result.Result) string {
	switch {
	case res.Shard == nil:
		return ""
	case res.Shard.From != "" && res.Shard.Schedules > 0:
		return fmt.Sprintf(" in shard %s (of %d; from %s)", res.Shard, res.Shard.Schedules, res.Shard.From)
	case res.Shard.From != "":
		return fmt.Sprintf(" in shard %s (from %s)", res.Shard, res.Shard.From)
	case res.Shard.Schedules > 0:
		return fmt.Sprintf(" in shard %s (of %d)", res.Shard, res.Shard.Schedules)
	}
	return fmt.Sprintf(" in shard %s", res.Shard)
}

// Exploration is what Explore found, for its message.
type Exploration struct {
	Result *result.Result
	// Flaky, Replay, Found, Minimal, FoundAfter, Seed and SavedTo are
	// harness.Exploration's fields of the same names.
	Flaky                  bool
	Replay, Found, Minimal string
	FoundAfter             int
	Seed                   uint64
	SavedTo                string
}

// ExplorationFinding is the message Explore fails a test with: the shrunk
// schedule with its deliveries and diffs, the seed, and the line that
// replays it. For a flaky schedule it says how the runs differed.
func ExplorationFinding(x Exploration, replay string) string {
	res := x.Result
	var b strings.Builder
	switch {
	case x.Flaky:
		failed := len(res.Failed())
		fmt.Fprintf(&b, "flaky: job %q: schedule %s failed %d of %d runs, so it is not reported as a pass; the handler depends on chance or timing:\n",
			res.Job, x.Minimal, failed, len(res.Scenarios))
		for i, s := range res.Scenarios {
			fmt.Fprintf(&b, "  run %d: %s", i+1, s.Verdict)
			var ps []string
			for _, p := range s.Problems {
				ps = append(ps, Problem(p))
			}
			if len(ps) > 0 {
				fmt.Fprintf(&b, ": %s", strings.Join(ps, "; "))
			}
			b.WriteString("\n")
		}
		b.WriteString("the first failing run:")
	case x.Replay != "":
		fmt.Fprintf(&b, "not idempotent: job %q: the replayed schedule %s fails", res.Job, x.Replay)
	case x.FoundAfter == 0:
		fmt.Fprintf(&b, "not idempotent: job %q: the saved schedule %s fails again", res.Job, x.Minimal)
	case x.Found == x.Minimal:
		fmt.Fprintf(&b, "not idempotent: job %q: exploration drew %d schedules and found this one failing: %s",
			res.Job, x.FoundAfter, x.Minimal)
	default:
		fmt.Fprintf(&b, "not idempotent: job %q: exploration drew %d schedules, found %s failing, and shrunk it to %s",
			res.Job, x.FoundAfter, x.Found, x.Minimal)
	}
	b.WriteString("\n")
	Findings(&b, res, res.Failed()[:1])
	b.WriteString("\n")
	if x.Seed != 0 {
		fmt.Fprintf(&b, "seed: %d (-twice.seed=%d draws this failure first)\n", x.Seed, x.Seed)
	}
	if x.SavedTo != "" {
		fmt.Fprintf(&b, "saved: %s (the next go test replays it first)\n", x.SavedTo)
	}
	fmt.Fprintf(&b, "rerun: %s", replay)
	return b.String()
}

// TimeColumns are the volatile "table.column"s of ref whose type is a
// date or time: a handler that fills one from time.Now() instead of the
// delivery's d.Now makes it volatile, and so compared nowhere.
func TimeColumns(ref *assert.Snapshot, volatile []string) []string {
	if ref == nil {
		return nil
	}
	types := map[string]string{}
	for _, t := range ref.Tables {
		for _, c := range t.Columns {
			types[t.Name+"."+c.Name] = c.Type
		}
	}
	var out []string
	for _, v := range volatile {
		if typ := types[v]; strings.HasPrefix(typ, "timestamp") || strings.HasPrefix(typ, "time") || typ == "date" {
			out = append(out, v)
		}
	}
	return out
}

// Warning is the line a check logs for w about job: "warning: job
// "x": delivery j1a1w1 (attempt 1) of schedule ... returned with 1
// connection still in a transaction or busy; ...".
func Warning(job string, w result.Warning) string {
	switch w.Kind {
	case result.TransactionLeftOpen:
		return leftOpen(job, w, leftOpenText{
			one: "still in a transaction or busy", many: "still in a transaction or busy",
			doneOne: "rolled it back", doneMany: "rolled them back",
			fix: "Commit or roll back every transaction before the handler returns (defer tx.Rollback(ctx) after Begin)",
		})
	case result.NoStepTaken:
		return fmt.Sprintf("warning: job %q: %s returned without a statement through d.DB, d.SQL() or d.DSN or an effect through the delivery's fakes, though the clean run took %d %s. If the handler works through a pool or client of its own there, the harness sees none of it: no fault reaches it, nothing of it is compared, and it may write to a database the harness did not create",
			job, warnedDeliveries(w), w.CleanSteps, text.Plural(w.CleanSteps, "step"))
	case result.CleanRunsDisagree:
		if w.Disagreement != nil {
			return fmt.Sprintf("warning: job %q: its two clean reference runs disagree beyond volatile columns: %s. The handler did not do the same thing twice on the same input (a counter kept across calls, randomness or time.Now() deciding what it does), so the reference is one outcome of several and what differed was left out of every comparison: this pass says little. Make the handler's work depend only on its job, the database and d.Now",
				job, disagreement(*w.Disagreement))
		}
	case result.ConnectionLeftOpen:
		return leftOpen(job, w, leftOpenText{
			one: "it opened on d.DSN still open", many: "they opened on d.DSN still open",
			doneOne: "closed it, a worker would keep it until it exits", doneMany: "closed them, a worker would keep them until it exits",
			fix: "Close every connection the handler opens (defer conn.Close(ctx)), or use d.DB or d.SQL(), which the harness closes",
		})
	case result.GoroutineOutlived:
		return fmt.Sprintf("warning: job %q: %s left %d %s it started still running 5s after its handler returned, when the harness stopped watching its connections and effects: what it did later was not checked. Wait for the goroutines the handler starts before it returns, or stop them with its context",
			job, warnedDeliveries(w), w.Connections, text.Plural(w.Connections, "goroutine"))
	}
	return fmt.Sprintf("warning: job %q: %s", job, w.Kind)
}

// firstWarned names the first delivery a warning is about.
func firstWarned(w result.Warning) string {
	return fmt.Sprintf("delivery %s (attempt %d) of schedule %s", w.First.Label(), w.First.Attempt, ScheduleName(w.Schedule))
}

// warnedDeliveries names the deliveries a warning is about: the first,
// and how many there were when more than one.
func warnedDeliveries(w result.Warning) string {
	if w.Deliveries > 1 {
		return fmt.Sprintf("%d deliveries, the first %s,", w.Deliveries, firstWarned(w))
	}
	return firstWarned(w)
}

// leftOpenText is what a warning about connections a delivery left open
// says: how they were left, for one delivery and for several, what the
// harness did about them, and the fix.
type leftOpenText struct{ one, many, doneOne, doneMany, fix string }

// leftOpen is the line of a TransactionLeftOpen or ConnectionLeftOpen
// warning in the words of t.
func leftOpen(job string, w result.Warning, t leftOpenText) string {
	first := fmt.Sprintf("%s returned with %d %s %s",
		firstWarned(w), w.Connections, text.Plural(w.Connections, "connection"), t.one)
	if w.Deliveries == 1 {
		return fmt.Sprintf("warning: job %q: %s; the harness %s. %s", job, first, t.doneOne, t.fix)
	}
	return fmt.Sprintf("warning: job %q: %d deliveries returned with a connection %s, the first %s; the harness %s. %s", job, w.Deliveries, t.many, first, t.doneMany, t.fix)
}

// disagreement says how two clean runs differed: "table "orders" has 1
// row in the first, 0 in the second; ...".
func disagreement(d result.Disagreement) string {
	var parts []string
	for _, c := range d.Rows {
		parts = append(parts, fmt.Sprintf("table %q has %d %s in the first, %d in the second", c.Name, c.Runs[0], text.Plural(c.Runs[0], "row"), c.Runs[1]))
	}
	for _, c := range d.Effects {
		parts = append(parts, fmt.Sprintf("%d %q %s in the first, %d in the second", c.Runs[0], c.Name, text.Plural(c.Runs[0], "effect"), c.Runs[1]))
	}
	if d.StepAt > 0 {
		parts = append(parts, fmt.Sprintf("the first took %d %s, the second %d, differing from step %d", d.Steps[0], text.Plural(d.Steps[0], "step"), d.Steps[1], d.StepAt))
	}
	return strings.Join(parts, "; ")
}

// ScheduleName is a schedule as messages name it: its text and the fault
// it came from, "j1a1w1!crash > +30s j1a2w2 (crash-before-ack)", or
// "j1a1w1 (a clean run)".
func ScheduleName(s faults.Schedule) string {
	if s.Fault == "" {
		return s.String() + " (a clean run)"
	}
	return fmt.Sprintf("%s (%s)", s, s.Fault)
}

// workAfterAck says what a delivery did after its handler returned, and
// what to do about it.
func workAfterAck(p result.Problem) string {
	const most = 3
	shown, more := p.Calls, ""
	if len(shown) > most {
		shown, more = shown[:most], fmt.Sprintf(", and %d more", len(p.Calls)-most)
	}
	return fmt.Sprintf("acked before its work was done: %s made %d %s after its handler returned, from a goroutine the handler left running: `%s`%s. "+
		"The queue acks a delivery when its handler returns, so a crash then loses that work and nothing redelivers the job: "+
		"wait for the goroutine before returning (sync.WaitGroup, errgroup), or enqueue the work as a job of its own",
		p.Delivery, len(p.Calls), text.Plural(len(p.Calls), "call"), strings.Join(shown, "`, `"), more)
}
