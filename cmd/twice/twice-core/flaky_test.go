package main

import (
	"strings"
	"testing"
	"time"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/record"
	"github.com/runtwice/twice/internal/report"
)

// flakyFixture is what go test and Explore leave behind when a drawn
// schedule fails on some runs only: Explore fails the test with
// "[twice] flaky", and its record holds every run of the schedule.
func flakyFixture(t *testing.T) *report.Report {
	t.Helper()
	sched, err := faults.Parse("j1a1w1 > j1a2w2")
	if err != nil {
		t.Fatal(err)
	}
	res := &result.Result{Job: "coin", Outcome: result.OutcomeFlaky, Scenarios: []result.Scenario{
		{Fault: "explore", Schedule: sched, Verdict: result.Idempotent},
		{Fault: "explore", Schedule: sched, Verdict: result.NotIdempotent, Problems: []result.Problem{{Kind: result.DidNotComplete, Detail: "job twice-job-1"}}},
	}}
	return oneCheckReport(t, "example.com/jobs/flaky", "TestExploreFlaky",
		`    flaky_test.go:20: [twice] flaky: job \"coin\": schedule j1a1w1 > j1a2w2 failed 1 of 2 runs`, false, res)
}

// A flaky exploration is flaky in every output and fails the run (exit
// 1); it is never an expected finding.
func TestFlakyExplorationIsFlaky(t *testing.T) {
	r := flakyFixture(t)
	if len(r.Jobs) != 1 {
		t.Fatalf("jobs = %+v, want one", r.Jobs)
	}
	j := r.Jobs[0]
	if j.Outcome != report.OutcomeFlaky {
		t.Errorf("job Outcome = %q (%s), want %q", j.Outcome, j.Expected, report.OutcomeFlaky)
	}
	for _, c := range j.Cells {
		if c.Outcome != report.OutcomeFlaky {
			t.Errorf("cell %s Outcome = %q, want %q", c.Fault, c.Outcome, report.OutcomeFlaky)
		}
	}
	if r.ExitCode != report.ExitFindings {
		t.Errorf("ExitCode = %d, want %d", r.ExitCode, report.ExitFindings)
	}
	if r.Summary.Flaky != 1 || r.Summary.ExpectedFinding != 0 {
		t.Errorf("summary = %+v, want one flaky job and no expected finding", r.Summary)
	}
	outs := outputs(t, r)
	for name, out := range outs {
		if !strings.Contains(strings.ToLower(out), "flaky") {
			t.Errorf("%s does not say flaky", name)
		}
		if strings.Contains(out, "did not fail the test") {
			t.Errorf("%s calls the flaky job an expected finding", name)
		}
	}
	if strings.Contains(outs["report.json"], `"status": "expected-finding"`) {
		t.Error("report.json gives the flaky job the status expected-finding")
	}
}

// A check that could not run says so in its record; the runner reports
// it as harness breakage (exit 2), not as a verdict on the job, whatever
// the test printed.
func TestInternalErrorRecordExitsBroken(t *testing.T) {
	const pkg = "example.com/jobs/broken"
	events := strings.Join([]string{
		`{"Action":"start","Package":"` + pkg + `"}`,
		`{"Action":"run","Package":"` + pkg + `","Test":"TestHit"}`,
		`{"Action":"output","Package":"` + pkg + `","Test":"TestHit","Output":"    hit_test.go:20: something went wrong\n"}`,
		`{"Action":"fail","Package":"` + pkg + `","Test":"TestHit","Elapsed":1}`,
		`{"Action":"fail","Package":"` + pkg + `","Elapsed":1}`,
	}, "\n") + "\n"
	runs := newTestRuns()
	if err := runs.read(strings.NewReader(events), nil); err != nil {
		t.Fatal(err)
	}
	recs := []record.Record{{Version: record.Version, Dir: "/src/broken", Test: "TestHit", Written: time.Now(),
		Error:  `[twice] internal: go-cmp panicked comparing table "counters"; check Options.CmpOptions: comparer broke`,
		Result: &result.Result{Job: "hit", Outcome: result.OutcomeInternalError}}}
	r := &report.Report{Command: "go test -json ./..."}
	(&builder{runs: runs, dirs: map[string]string{"/src/broken": pkg}, cwd: "/src"}).build(r, recs)
	r.Finish()
	if len(r.Jobs) != 0 {
		t.Errorf("jobs = %+v, want none: a check that could not run has no verdict", r.Jobs)
	}
	if len(r.Summary.Problems) != 1 || r.Summary.Problems[0].Kind != report.ProblemHarnessError {
		t.Fatalf("problems = %+v, want one harness-error", r.Summary.Problems)
	}
	if msg := r.Summary.Problems[0].Message; !strings.Contains(msg, "go-cmp panicked") {
		t.Errorf("message = %q, want the record's error", msg)
	}
	if r.ExitCode != report.ExitBroken {
		t.Errorf("ExitCode = %d, want %d", r.ExitCode, report.ExitBroken)
	}
}

// A Check whose failing scenario did not fail again on a fresh database
// is flaky in every output, which say what the rerun did.
func TestUnconfirmedFindingIsFlakyEverywhere(t *testing.T) {
	sched, err := faults.Parse("j1a1w1!crash > +30s j1a2w2")
	if err != nil {
		t.Fatal(err)
	}
	res := &result.Result{Job: "alternating", Outcome: result.OutcomeFlaky, Scenarios: []result.Scenario{{
		Fault: faults.NameCrashBeforeAck, Schedule: sched, Verdict: result.Flaky,
		Problems: []result.Problem{{Kind: result.StateDiffers, Table: "counters"}},
		Rerun:    &result.Rerun{Verdict: result.Idempotent},
	}}}
	r := oneCheckReport(t, "example.com/jobs/alternating", "TestAlternating",
		`    alternating_test.go:20: [twice] flaky: job \"alternating\": 1 of 1 scenarios failed`, false, res)
	if len(r.Jobs) != 1 || r.Jobs[0].Outcome != report.OutcomeFlaky {
		t.Fatalf("jobs = %+v, want one flaky job", r.Jobs)
	}
	j := r.Jobs[0]
	if len(j.Findings) != 1 || j.Findings[0].Outcome != report.OutcomeFlaky {
		t.Fatalf("findings = %+v, want one flaky finding", j.Findings)
	}
	if r.ExitCode != report.ExitFindings {
		t.Errorf("ExitCode = %d, want %d", r.ExitCode, report.ExitFindings)
	}
	const rerun = "run again on a fresh database, the same schedule was idempotent"
	for name, out := range outputs(t, r) {
		if !strings.Contains(out, rerun) {
			t.Errorf("%s does not say what the rerun did (%q)", name, rerun)
		}
		if !strings.Contains(strings.ToLower(out), "flaky") {
			t.Errorf("%s does not say flaky", name)
		}
	}
}
