package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/runtwice/twice/internal/golden"
	"github.com/runtwice/twice/internal/record"
	"github.com/runtwice/twice/internal/report"
)

// fixtureReport builds a report from testdata: records harness.Check wrote
// for the bundled examples (trimmed; one renamed into a test without its
// ExpectFinding) and a go test -json stream with a build failure, a crash,
// a package without harness checks and one without tests.
func fixtureReport(t *testing.T) *report.Report {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	runs := newTestRuns()
	if err := runs.read(f, nil); err != nil {
		t.Fatal(err)
	}
	recs, err := record.Read(filepath.Join("testdata", "records"))
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string]string{}
	for _, p := range []string{"checkthenact", "loyalty", "orderstatus", "payouts", "receipts"} {
		dirs["/src/twice/examples/"+p] = "github.com/runtwice/twice/examples/" + p
	}
	r := &report.Report{
		Started: time.Date(2026, 11, 30, 8, 33, 50, 0, time.UTC),
		Host:    "ci-runner",
		Command: "go test -json -count=1 ./examples/... example.com/jobs/...",
	}
	(&builder{runs: runs, dirs: dirs, cwd: "/src/twice"}).build(r, recs)
	r.Duration = 98765
	r.Finish()
	return r
}

// TestBuildFixture pins the report built from the fixture; the file is
// the input of internal/report's golden tests, so they render what twice
// really builds.
func TestBuildFixture(t *testing.T) {
	r := fixtureReport(t)
	data, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	golden.Equal(t, "../../../../internal/report/testdata/input.json", string(data))
}

func TestBuildVerdicts(t *testing.T) {
	r := fixtureReport(t)
	outcome := map[string]report.Outcome{}
	for _, j := range r.Jobs {
		outcome[j.Test] = j.Outcome
	}
	want := map[string]report.Outcome{
		"TestRewardByIncrement": report.OutcomeExpected, // Config.ExpectFinding
		"TestRewardWithLedger":  report.OutcomeIdempotent,
		"TestAdvanceUnmarked":   report.OutcomeFinding, // Check failed the test
		"TestMarkThenSend":      report.OutcomeExpected,
		"TestWithJobKey":        report.OutcomeExpected,
		"TestCheckThenAct":      report.OutcomeExpected,
	}
	for test, w := range want {
		if outcome[test] != w {
			t.Errorf("outcome of %s = %q, want %q", test, outcome[test], w)
		}
	}
	var kinds []string
	for _, p := range r.Summary.Problems {
		kinds = append(kinds, p.Package+" "+p.Kind)
	}
	wantKinds := []string{
		"example.com/jobs/broken build-failed",
		"example.com/jobs/crash crashed",
		"example.com/jobs/notests no-test-files",
		"example.com/jobs/plain no-harness-tests",
		"github.com/runtwice/twice/examples/orderstatus test-failed", // TestGoldenMessage
	}
	if !slices.Equal(kinds, wantKinds) {
		t.Errorf("problems = %q\nwant %q", kinds, wantKinds)
	}
	if r.ExitCode != report.ExitBroken {
		t.Errorf("ExitCode = %d, want %d (a build failure and a crash)", r.ExitCode, report.ExitBroken)
	}
}

func TestSplitTwiceFlags(t *testing.T) {
	rest, env, err := splitTwiceFlags([]string{"-run", "X", "-twice.database-url=postgres://h/db", "./...", "--twice.seed", "7"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"-run", "X", "./..."}; !slices.Equal(rest, want) {
		t.Errorf("rest = %q, want %q", rest, want)
	}
	if want := []string{"TWICE_DATABASE_URL=postgres://h/db", "TWICE_SEED=7"}; !slices.Equal(env, want) {
		t.Errorf("env = %q, want %q", env, want)
	}
	if _, _, err := splitTwiceFlags([]string{"-twice.seed"}); err == nil {
		t.Error("-twice.seed without a value: no error")
	}
}
