package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/record"
	"github.com/runtwice/twice/internal/report"
)

// TestReportCleanRunsDisagreeBesideAFinding: a check whose two clean runs
// disagree (a handler with a once-flag in memory) is that job's problem,
// shown as such, and the finding of another check in the same package
// stands: exit 1, a true headline (issue 37).
func TestReportCleanRunsDisagreeBesideAFinding(t *testing.T) {
	code, out, r := twiceReport(t, "./testdata/cleandisagree")
	if code != report.ExitFindings {
		t.Errorf("exit code = %d, want %d", code, report.ExitFindings)
	}
	outcome := map[string]report.Outcome{}
	for _, j := range r.Jobs {
		outcome[j.Name] = j.Outcome
	}
	if len(r.Jobs) != 2 || outcome["add-points"] != report.OutcomeFinding || outcome["once-in-memory"] != report.OutcomeIdempotent {
		t.Errorf("jobs = %v, want add-points a finding and once-in-memory idempotent", outcome)
	}
	if kinds := problemKinds(r); len(kinds) != 1 || kinds[0] != report.ProblemCleanRunsDisagree {
		t.Fatalf("problems = %q, want one %s", kinds, report.ProblemCleanRunsDisagree)
	}
	if p := r.Summary.Problems[0]; p.Test != "TestOnceInMemory" || p.Fatal || !strings.Contains(p.Message, `job "once-in-memory": its two clean reference runs disagree`) {
		t.Errorf("problem = %+v, want TestOnceInMemory's clean runs, not fatal", p)
	}
	for _, want := range []string{
		`[twice] warning: job "once-in-memory": its two clean reference runs disagree`,
		`[twice] finding: job "add-points"`,
		"[twice] not idempotent: 2 jobs: 1 idempotent, 0 known not idempotent (expected), 1 finding\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, not := range []string{"internal", "not a record", "not with a finding of twice", "none calls harness.Check"} {
		if strings.Contains(out, not) {
			t.Errorf("output has %q", not)
		}
	}
}

// TestUnreadableRecordIsThatChecksProblem: a record twice cannot read is
// a harness error of its own check, named by its test; the other checks'
// results stand, and the headline counts one error.
func TestUnreadableRecordIsThatChecksProblem(t *testing.T) {
	const pkg = "example.com/jobs/points"
	events := strings.Join([]string{
		`{"Action":"start","Package":"` + pkg + `"}`,
		`{"Action":"run","Package":"` + pkg + `","Test":"TestGood"}`,
		`{"Action":"pass","Package":"` + pkg + `","Test":"TestGood","Elapsed":1}`,
		`{"Action":"run","Package":"` + pkg + `","Test":"TestLost"}`,
		`{"Action":"pass","Package":"` + pkg + `","Test":"TestLost","Elapsed":1}`,
		`{"Action":"pass","Package":"` + pkg + `","Elapsed":1}`,
	}, "\n") + "\n"
	runs := newTestRuns()
	if err := runs.read(strings.NewReader(events), nil); err != nil {
		t.Fatal(err)
	}
	recs := []record.Record{{Version: record.Version, Dir: "/src/points", Test: "TestGood", Written: time.Now(),
		Result: &result.Result{Job: "good", Outcome: result.OutcomeIdempotent}}}
	bad := []record.Unreadable{{File: "points-1-2-TestLost.json", Dir: "/src/points", Test: "TestLost",
		Err: errors.New(`[twice] internal: harness result points-1-2-TestLost.json is not a record: [twice] schedule "x": nonsense`)}}
	r := &report.Report{Command: "go test -json ./..."}
	(&builder{runs: runs, dirs: map[string]string{"/src/points": pkg}, cwd: "/src", unreadable: bad}).build(r, recs)
	r.Finish()
	if len(r.Jobs) != 1 || r.Jobs[0].Name != "good" || r.Jobs[0].Outcome != report.OutcomeIdempotent {
		t.Errorf("jobs = %+v, want good, idempotent", r.Jobs)
	}
	if len(r.Summary.Problems) != 1 {
		t.Fatalf("problems = %+v, want one", r.Summary.Problems)
	}
	p := r.Summary.Problems[0]
	if p.Kind != report.ProblemHarnessError || p.Test != "TestLost" || p.Package != pkg || !p.Fatal {
		t.Errorf("problem = %+v, want TestLost's harness error", p)
	}
	if want := "the result points-1-2-TestLost.json of TestLost in " + pkg + " could not be read, so its verdict is unknown (every other check's stands)"; !strings.Contains(p.Message, want) {
		t.Errorf("message %q lacks %q", p.Message, want)
	}
	if got, want := r.Headline(), "[twice] could not check every job (harness-error): 1 job: 1 idempotent, 0 known not idempotent (expected), 0 findings, 1 error"; got != want {
		t.Errorf("Headline() = %q, want %q", got, want)
	}
}
