package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/record"
	"github.com/runtwice/twice/internal/report"
)

// A check stopped by the user's code (a worker that panics on its clean
// run) is the user's error in the report, not a harness error (issue 27).
func TestUserErrorRecordIsNotAHarnessError(t *testing.T) {
	const pkg = "example.com/jobs/panics"
	events := strings.Join([]string{
		`{"Action":"start","Package":"` + pkg + `"}`,
		`{"Action":"run","Package":"` + pkg + `","Test":"TestHit"}`,
		`{"Action":"fail","Package":"` + pkg + `","Test":"TestHit","Elapsed":1}`,
		`{"Action":"fail","Package":"` + pkg + `","Elapsed":1}`,
	}, "\n") + "\n"
	runs := newTestRuns()
	if err := runs.read(strings.NewReader(events), nil); err != nil {
		t.Fatal(err)
	}
	recs := []record.Record{{Version: record.Version, Dir: "/src/panics", Test: "TestHit", Written: time.Now(),
		Error:  `[twice] job "hit" failed on its clean reference run 1 (delivery j1a1w1), so there is nothing to compare with: handler panicked: boom`,
		Result: &result.Result{Job: "hit", Outcome: result.OutcomeUserError}}}
	r := &report.Report{Command: "go test -json ./..."}
	(&builder{runs: runs, dirs: map[string]string{"/src/panics": pkg}, cwd: "/src"}).build(r, recs)
	r.Finish()
	if len(r.Summary.Problems) != 1 || r.Summary.Problems[0].Kind != report.ProblemUserError {
		t.Fatalf("problems = %+v, want one user-error", r.Summary.Problems)
	}
	if got, want := r.Title(), "Not every job could be checked: user error"; got != want {
		t.Errorf("Title() = %q, want %q", got, want)
	}
	if msg := r.Summary.Problems[0].Message; !strings.Contains(msg, `job "hit" failed on its clean reference run 1 (delivery j1a1w1)`) || strings.Contains(msg, "internal") {
		t.Errorf("message = %q, want the record's error, not an internal one", msg)
	}
}

// Five checks that could not run, whether the harness or the user's code
// stopped them, are five errors in the headline, not the harness's alone
// (issue 37).
func TestHeadlineCountsEveryCheckThatCouldNotRun(t *testing.T) {
	const pkg = "example.com/jobs/stopped"
	lines := []string{`{"Action":"start","Package":"` + pkg + `"}`}
	var recs []record.Record
	for i, outcome := range []result.Outcome{result.OutcomeUserError, result.OutcomeUserError, result.OutcomeInternalError, result.OutcomeUserError, result.OutcomeUserError} {
		test := fmt.Sprintf("TestStopped%d", i)
		lines = append(lines, `{"Action":"run","Package":"`+pkg+`","Test":"`+test+`"}`, `{"Action":"fail","Package":"`+pkg+`","Test":"`+test+`","Elapsed":1}`)
		recs = append(recs, record.Record{Version: record.Version, Dir: "/src/stopped", Test: test, Written: time.Now(),
			Error: "[twice] job failed on its clean reference run", Result: &result.Result{Job: fmt.Sprintf("job-%d", i), Outcome: outcome}})
	}
	lines = append(lines, `{"Action":"fail","Package":"`+pkg+`","Elapsed":1}`)
	runs := newTestRuns()
	if err := runs.read(strings.NewReader(strings.Join(lines, "\n")+"\n"), nil); err != nil {
		t.Fatal(err)
	}
	r := &report.Report{Command: "go test -json ./..."}
	(&builder{runs: runs, dirs: map[string]string{"/src/stopped": pkg}, cwd: "/src"}).build(r, recs)
	r.Finish()
	if r.Summary.Errors != 5 {
		t.Errorf("Summary.Errors = %d, want 5", r.Summary.Errors)
	}
	if got, want := r.Headline(), "[twice] could not check every job (user-error, harness-error): 0 jobs: 0 idempotent, 0 known not idempotent (expected), 0 findings, 5 errors"; got != want {
		t.Errorf("Headline() = %q, want %q", got, want)
	}
}
