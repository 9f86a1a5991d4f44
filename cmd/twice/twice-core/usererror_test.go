package main

import (
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
		Result: &result.Result{Job: "hit", Status: result.StatusUserError}}}
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
