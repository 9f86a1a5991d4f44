package report_test

import (
	"strings"
	"testing"

	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/report"
)

// shardReport is shard i/n of a run with one job of schedules schedules,
// of which this shard ran ran.
func shardReport(i, n, schedules, ran int) *report.Report {
	r := &report.Report{
		Command: "go test -json -count=1 ./...", Twice: "v1.2.0", Commit: "aaaa", Shard: &report.Shard{Index: i, Count: n},
		Faults: []string{"run-twice"},
		Jobs: []report.Job{{
			Name: "pay", Package: "example.com/pay", Test: "TestPay", TestPassed: true, Outcome: report.OutcomeIdempotent,
			Runs: 1, Scenarios: ran, Schedules: schedules, Steps: []report.Step{{Text: "UPDATE t SET n = 1"}},
			Cells: []report.Cell{{Fault: "run-twice", Outcome: report.OutcomeIdempotent, Scenarios: ran}},
		}},
	}
	r.Finish()
	return r
}

func TestMergeRefusesOtherThanOneRunsShards(t *testing.T) {
	in := func(rs ...*report.Report) []report.Input {
		var out []report.Input
		for i, r := range rs {
			out = append(out, report.Input{From: "r" + string(rune('1'+i)) + "/report.json", Report: r})
		}
		return out
	}
	whole := shardReport(1, 1, 3, 3)
	whole.Shard = nil
	otherTwice := shardReport(2, 2, 3, 1)
	otherTwice.Twice = "v1.3.0"
	otherCommit := shardReport(2, 2, 3, 1)
	otherCommit.Commit = "bbbb"
	otherCommand := shardReport(2, 2, 3, 1)
	otherCommand.Command = "go test -json -count=1 -run=X ./..."
	otherSteps := shardReport(2, 2, 3, 1)
	otherSteps.Jobs[0].Steps = []report.Step{{Text: "UPDATE t SET n = 2"}}
	lacksJob := shardReport(2, 2, 3, 1)
	lacksJob.Jobs = nil
	for _, tc := range []struct {
		name string
		in   []report.Input
		err  string
	}{
		{"nothing", nil, "[twice] nothing to merge: give the report.json of every shard"},
		{"not a shard", in(whole), "[twice] r1/report.json is not a shard's report: write each shard's with twice report -shard i/n"},
		{"counts differ", in(shardReport(1, 2, 3, 2), shardReport(2, 3, 3, 1)), "[twice] r1/report.json is shard 1/2, r2/report.json is shard 2/3: merge the shards of one run, split one way"},
		{"shard twice", in(shardReport(1, 2, 3, 2), shardReport(1, 2, 3, 2)), "[twice] shard 1/2 is given twice: r1/report.json and r2/report.json"},
		{"shard missing", in(shardReport(1, 3, 3, 1), shardReport(3, 3, 3, 1)), "[twice] shard 2/3 missing: merge the reports of all 3 shards"},
		{"other twice", in(shardReport(1, 2, 3, 2), otherTwice), "[twice] shard 2/2 (r2/report.json) was written by twice v1.3.0, shard 1/2 (r1/report.json) by twice v1.2.0: run every shard with the same twice"},
		{"other commit", in(shardReport(1, 2, 3, 2), otherCommit), "[twice] shard 2/2 (r2/report.json) checked commit bbbb, shard 1/2 (r1/report.json) commit aaaa: merge the shards of one run"},
		{"other command", in(shardReport(1, 2, 3, 2), otherCommand), `ran "go test -json -count=1 -run=X ./..."`},
		{"other steps", in(shardReport(1, 2, 3, 2), otherSteps), `[twice] job "pay" (example.com/pay TestPay): its clean run took other steps in shard 2/2 (r2/report.json) than in shard 1/2 (r1/report.json): the shards ran different code`},
		{"other schedules", in(shardReport(1, 2, 3, 2), shardReport(2, 2, 4, 2)), `has 4 schedules in shard 2/2 (r2/report.json) but 3 in shard 1/2`},
		{"scenarios lost", in(shardReport(1, 2, 3, 1), shardReport(2, 2, 3, 1)), `its shards ran 2 scenarios together, but the check has 3 schedules`},
		{"job missing", in(shardReport(1, 2, 3, 2), lacksJob), `[twice] job "pay" (example.com/pay TestPay) is in some shards' reports but not in shard 2/2's (r2/report.json), which reports no failure that explains it`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := report.Merge(tc.in)
			if err == nil || !strings.Contains(blame.Message(err), tc.err) {
				t.Fatalf("Merge = %v, %v; want an error containing %q", r, err, tc.err)
			}
		})
	}
}

// Shards' cells add up; a fault only some shards ran keeps its column,
// and findings come in their unsharded order, a repeated difference
// named the same as its first showing across shards.
func TestMergeJoinsCellsAndFindings(t *testing.T) {
	one, two := shardReport(1, 2, 3, 2), shardReport(2, 2, 3, 1)
	one.Faults = []string{"run-twice", "crash-mid-job"}
	one.Jobs[0].Cells = []report.Cell{
		{Fault: "run-twice", Outcome: report.OutcomeFinding, Scenarios: 1, Failed: 1},
		{Fault: "crash-mid-job", Outcome: report.OutcomeFinding, Scenarios: 1, Failed: 1},
	}
	one.Jobs[0].Failed, two.Jobs[0].Failed = 2, 1
	one.Jobs[0].Findings = []report.Finding{
		{Fault: "run-twice", Schedule: "j1a1w1 > j1a2w2", Scenario: 1, Difference: "a"},
		{Fault: "crash-mid-job", Schedule: "j1a1w1!crash:1 > +30s j1a2w2", Scenario: 3, Difference: "a", SameAs: "j1a1w1 > j1a2w2"},
	}
	two.Faults = []string{"run-twice", "crash-mid-job"}
	two.Jobs[0].Cells = []report.Cell{
		{Fault: "run-twice", Outcome: report.OutcomeIdempotent},
		{Fault: "crash-mid-job", Outcome: report.OutcomeFinding, Scenarios: 1, Failed: 1},
	}
	two.Jobs[0].Findings = []report.Finding{{Fault: "crash-mid-job", Schedule: "j1a1w1!crash:2 > +30s j1a2w2", Scenario: 2, Difference: "a"}}
	two.Jobs[0].TestPassed = false
	m, err := report.Merge([]report.Input{{From: "2", Report: two}, {From: "1", Report: one}})
	if err != nil {
		t.Fatal(err)
	}
	if m.Shard != nil || len(m.Jobs) != 1 {
		t.Fatalf("merged: shard %v, %d jobs; want no shard, one job", m.Shard, len(m.Jobs))
	}
	j := m.Jobs[0]
	if j.Outcome != report.OutcomeFinding || j.Scenarios != 3 || j.Failed != 3 || j.TestPassed {
		t.Errorf("job: Outcome %s, %d scenarios, %d failed, test passed %v; want finding, 3, 3, false", j.Outcome, j.Scenarios, j.Failed, j.TestPassed)
	}
	var cells, findings []string
	for _, c := range j.Cells {
		cells = append(cells, c.Fault+":"+string(c.Outcome)+":"+string(rune('0'+c.Scenarios)))
	}
	for _, f := range j.Findings {
		findings = append(findings, f.Schedule+" same as "+f.SameAs)
	}
	if got, want := strings.Join(cells, " "), "run-twice:finding:1 crash-mid-job:finding:2"; got != want {
		t.Errorf("cells %s, want %s", got, want)
	}
	want := "j1a1w1 > j1a2w2 same as |j1a1w1!crash:2 > +30s j1a2w2 same as j1a1w1 > j1a2w2|j1a1w1!crash:1 > +30s j1a2w2 same as j1a1w1 > j1a2w2"
	if got := strings.Join(findings, "|"); got != want {
		t.Errorf("findings\n%s\nwant\n%s", got, want)
	}
	if m.ExitCode != report.ExitFindings || strings.Join(m.Faults, " ") != "run-twice crash-mid-job" {
		t.Errorf("exit %d, faults %q; want %d, run-twice crash-mid-job", m.ExitCode, m.Faults, report.ExitFindings)
	}
}

// An effect call's text may differ between shards' clean runs (a random
// idempotency key, a volatile effect): the shards still merge. A call of
// another kind in its place does not.
func TestMergeIgnoresEffectPayloads(t *testing.T) {
	one, two := shardReport(1, 2, 3, 2), shardReport(2, 2, 3, 1)
	one.Jobs[0].Steps = append(one.Jobs[0].Steps, report.Step{Text: "payment key=6b54 amount=100", Effect: "payment"})
	two.Jobs[0].Steps = append(two.Jobs[0].Steps, report.Step{Text: "payment key=7299 amount=100", Effect: "payment"})
	in := []report.Input{{From: "r1/report.json", Report: one}, {From: "r2/report.json", Report: two}}
	if _, err := report.Merge(in); err != nil {
		t.Fatalf("Merge refused shards whose clean runs differ only in a payment's key: %v", err)
	}
	two.Jobs[0].Steps[1].Effect = "email"
	if _, err := report.Merge(in); err == nil || !strings.Contains(err.Error(), "took other steps") {
		t.Fatalf("Merge = %v; want it to refuse a payment in one shard where the other sent an email", err)
	}
}

// Shards of an exploration that shrank to the same minimal schedule show
// it once, as the whole run does; a shard's own repeats (the runs of a
// flaky schedule) stay.
func TestMergeShowsARepeatedExplorationOnce(t *testing.T) {
	shard := func(i int, findings ...report.Finding) *report.Report {
		r := shardReport(i, 3, 0, len(findings))
		r.Faults = []string{"explore"}
		j := &r.Jobs[0]
		j.Outcome, j.Failed, j.Findings = report.OutcomeExpected, len(findings), findings
		j.Cells = []report.Cell{{Fault: "explore", Outcome: report.OutcomeExpected, Scenarios: len(findings), Failed: len(findings)}}
		return r
	}
	minimal := report.Finding{Fault: "explore", Schedule: "j1a1w1 > j2a1w2!crash:1", Outcome: report.OutcomeExpected, Difference: "a"}
	m, err := report.Merge([]report.Input{
		{From: "1", Report: shard(1, minimal)},
		{From: "2", Report: shard(2)},
		{From: "3", Report: shard(3, minimal)},
	})
	if err != nil {
		t.Fatal(err)
	}
	j := m.Jobs[0]
	if len(j.Findings) != 1 || j.Scenarios != 1 || j.Failed != 1 || j.Cells[0].Scenarios != 1 || j.Cells[0].Failed != 1 {
		t.Errorf("merged: %d findings, %d scenarios, %d failed, cell %+v; want the minimal schedule once", len(j.Findings), j.Scenarios, j.Failed, j.Cells[0])
	}

	flaky := minimal
	flaky.Outcome = report.OutcomeFlaky
	m, err = report.Merge([]report.Input{
		{From: "1", Report: shard(1, flaky, flaky)},
		{From: "2", Report: shard(2)},
		{From: "3", Report: shard(3)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(m.Jobs[0].Findings); n != 2 {
		t.Errorf("merged: %d runs of the flaky schedule, want the shard's 2", n)
	}
}

// A job's worst severity is the worst of its shards', whichever shard
// comes first: a shard dealt none of the failing schedules says "none".
func TestMergeKeepsTheWorstSeverity(t *testing.T) {
	calm, hit := shardReport(1, 2, 2, 1), shardReport(2, 2, 2, 1)
	hit.Jobs[0].Outcome, hit.Jobs[0].Failed, hit.Jobs[0].Worst = report.OutcomeFinding, 1, result.SeverityMoney
	hit.Jobs[0].Cells[0].Outcome, hit.Jobs[0].Cells[0].Failed = report.OutcomeFinding, 1
	hit.Jobs[0].Findings = []report.Finding{{Fault: "run-twice", Schedule: "j1a1w1 > j1a2w2", Scenario: 2, Severity: result.SeverityMoney}}
	m, err := report.Merge([]report.Input{{From: "1", Report: calm}, {From: "2", Report: hit}})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Jobs[0].Worst; got != result.SeverityMoney {
		t.Errorf("merged worst %s, want money", got)
	}
}

// A registry's kinds without a check are named in every format, once
// however many shards wrote them.
func TestWorkersWithoutACheck(t *testing.T) {
	one, two := shardReport(1, 2, 2, 1), shardReport(2, 2, 2, 1)
	cov := result.Coverage{Registry: "River workers bundle", Kinds: []string{"a", "b", "c"}, Unchecked: []string{"c"}}
	one.AddRegistry("example.com/pay", "TestWorkers", cov)
	two.AddRegistry("example.com/pay", "TestWorkers", cov)
	two.AddRegistry("example.com/pay", "TestWorkers", cov)
	m, err := report.Merge([]report.Input{{From: "1", Report: one}, {From: "2", Report: two}})
	if err != nil {
		t.Fatal(err)
	}
	if gs := m.WithoutCheckWorkers(); len(gs) != 1 || gs[0].Unchecked[0] != "c" {
		t.Fatalf("workers without a check: %+v", gs)
	}
	html, err := m.HTML()
	if err != nil {
		t.Fatal(err)
	}
	for what, text := range map[string]string{"index.html": string(html), "summary.md": m.Markdown()} {
		if !strings.Contains(text, "Workers without a check") || !strings.Contains(text, "River workers bundle") || !strings.Contains(text, "<code>c</code>") && !strings.Contains(text, "`c`") {
			t.Errorf("%s does not name the worker without a check", what)
		}
	}
}
