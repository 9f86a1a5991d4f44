package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runtwice/twice/cmd/twice/internal/about"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/internal/longtest"
	"github.com/runtwice/twice/internal/report"
)

// The packages under testdata fail on purpose; their databases are not
// evidence anyone will read, and on a shared server they would stay.
func init() { _ = os.Setenv(harness.KeepEnv, "false") }

// twiceReport runs twice report in process on packages of testdata and
// returns its exit code, stdout and the report.json it wrote.
func twiceReport(t *testing.T, pkgs ...string) (int, string, *report.Report) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "twice-report")
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"report", "-o", dir}, pkgs...), &stdout, &stderr)
	t.Logf("twice report %s: exit %d\n%s%s", strings.Join(pkgs, " "), code, stderr.String(), stdout.String())
	for _, f := range []string{report.FileHTML, report.FileMarkdown, report.FileJUnit, report.FileJSON} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the report lacks %s: %v", f, err)
		}
	}
	r := readReport(t, dir)
	if r.ExitCode != code {
		t.Errorf("report.json exit_code = %d, twice exited %d", r.ExitCode, code)
	}
	return code, stdout.String(), r
}

// readReport reads the report.json in dir.
func readReport(t *testing.T, dir string) *report.Report {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, report.FileJSON))
	if err != nil {
		t.Fatal(err)
	}
	var r report.Report
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

func problemKinds(r *report.Report) []string {
	var out []string
	for _, p := range r.Summary.Problems {
		out = append(out, p.Kind)
	}
	return out
}

func TestReportUnexpectedFindingExits1(t *testing.T) {
	code, out, r := twiceReport(t, "./testdata/unexpected")
	if code != report.ExitFindings {
		t.Errorf("exit code = %d, want %d", code, report.ExitFindings)
	}
	if len(r.Jobs) != 1 || r.Jobs[0].Outcome != report.OutcomeFinding {
		t.Fatalf("jobs = %+v, want one with an unexpected finding", r.Jobs)
	}
	f := r.Jobs[0].Findings[0]
	if f.Schedule != "j1a1w1 > j1a2w2" || len(f.StateDiff) == 0 {
		t.Errorf("first finding = %s with %d table diffs, want run-twice's schedule with a diff", f.Schedule, len(f.StateDiff))
	}
	if want := `twice replay 'j1a1w1 > j1a2w2' ./testdata/unexpected -run '^TestAddPoints$'`; f.Replay != want {
		t.Errorf("replay = %s, want %s", f.Replay, want)
	}
	if !strings.Contains(out, "[twice] not idempotent: 1 job: 0 idempotent, 0 known not idempotent (expected), 1 finding") {
		t.Errorf("output lacks the headline:\n%s", out)
	}
}

// TestReportReplayLinesNameTwiceAsItRan: run by go run (the launcher
// says so in about.CommandEnv), the replay lines twice prints start with
// go run, not a twice that may not be on PATH (issue 37).
func TestReportReplayLinesNameTwiceAsItRan(t *testing.T) {
	const via = "go run github.com/runtwice/twice/cmd/twice"
	t.Setenv(about.CommandEnv, via)
	_, _, r := twiceReport(t, "./testdata/unexpected")
	if len(r.Jobs) != 1 || len(r.Jobs[0].Findings) == 0 {
		t.Fatalf("jobs = %+v, want one with findings", r.Jobs)
	}
	if want := via + ` replay 'j1a1w1 > j1a2w2' ./testdata/unexpected -run '^TestAddPoints$'`; r.Jobs[0].Findings[0].Replay != want {
		t.Errorf("replay = %s, want %s", r.Jobs[0].Findings[0].Replay, want)
	}
}

func TestReportCompileErrorExits2(t *testing.T) {
	code, out, r := twiceReport(t, "./testdata/nocompile")
	if code != report.ExitBroken {
		t.Errorf("exit code = %d, want %d", code, report.ExitBroken)
	}
	if kinds := problemKinds(r); len(kinds) != 1 || kinds[0] != report.ProblemBuildFailed {
		t.Errorf("problems = %q, want one build-failed", kinds)
	}
	if !strings.Contains(out, "does not compile") || !strings.Contains(out, "declared and not used: unused") {
		t.Errorf("output does not say what did not compile:\n%s", out)
	}
}

func TestReportCrashExits2(t *testing.T) {
	code, out, r := twiceReport(t, "./testdata/crash")
	if code != report.ExitBroken {
		t.Errorf("exit code = %d, want %d", code, report.ExitBroken)
	}
	if len(r.Summary.Problems) != 1 || r.Summary.Problems[0].Kind != report.ProblemCrashed || r.Summary.Problems[0].Test != "TestZExits" {
		t.Errorf("problems = %+v, want TestZExits crashed", r.Summary.Problems)
	}
	if !strings.Contains(out, "exited during TestZExits") {
		t.Errorf("output does not name the test that crashed:\n%s", out)
	}
	// What ran before the crash is still reported.
	if len(r.Jobs) != 1 || r.Jobs[0].Outcome != report.OutcomeIdempotent {
		t.Errorf("jobs = %+v, want set-points, idempotent", r.Jobs)
	}
}

func TestReportNoHarnessChecksExits2(t *testing.T) {
	code, _, r := twiceReport(t, "./testdata/plain")
	if code != report.ExitBroken {
		t.Errorf("exit code = %d, want %d", code, report.ExitBroken)
	}
	want := []string{report.ProblemNoHarnessTests, report.ProblemGoTest}
	if kinds := problemKinds(r); strings.Join(kinds, " ") != strings.Join(want, " ") {
		t.Errorf("problems = %q, want %q", kinds, want)
	}
}

func TestReportNoHarnessChecksBesideOthersWarns(t *testing.T) {
	code, _, r := twiceReport(t, "./testdata/plain", "./testdata/unexpected")
	if code != report.ExitFindings {
		t.Errorf("exit code = %d, want %d: a package without checks is only a warning", code, report.ExitFindings)
	}
	if kinds := problemKinds(r); len(kinds) != 1 || kinds[0] != report.ProblemNoHarnessTests {
		t.Errorf("problems = %q, want one no-harness-tests", kinds)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"frobnicate"}, {"report", "-nosuchflag"}, {"replay"}, {"replay", "j1a1w1 > nonsense", "-run", "X"}, {"replay", "j1a1w1 > j1a2w2"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("twice %q: exit %d, want 2", args, code)
		}
		if stderr.Len() == 0 {
			t.Errorf("twice %q: nothing on stderr says why", args)
		}
	}
}

// TestReportExamples is the "done when": on the bundled examples,
// go run ./cmd/twice report writes all four files, shows every broken
// example as an expected finding with its diagram, and exits 0.
func TestReportExamples(t *testing.T) {
	longtest.Skip(t, "runs every example's checks, minutes")
	dir := filepath.Join(t.TempDir(), "twice-report")
	cmd := exec.Command("go", "run", "./cmd/twice", "report", "-o", dir, "./examples/...")
	cmd.Dir = filepath.Join("..", "..", "..")
	out, err := cmd.CombinedOutput()
	t.Logf("go run ./cmd/twice report ./examples/...:\n%s", out)
	if err != nil {
		t.Errorf("exit: %v, want 0", err)
	}
	r := readReport(t, dir)
	html, err := os.ReadFile(filepath.Join(dir, report.FileHTML))
	if err != nil {
		t.Fatal(err)
	}
	expected := 0
	for _, j := range r.Jobs {
		switch j.Outcome {
		case report.OutcomeIdempotent:
		case report.OutcomeExpected:
			expected++
			if len(j.Findings) == 0 {
				t.Errorf("%s %s: an expected finding without findings", j.Package, j.Test)
			}
		default:
			t.Errorf("%s %s: Outcome %s, want idempotent or expected-finding", j.Package, j.Test, j.Outcome)
		}
	}
	if expected == 0 {
		t.Error("no example is an expected finding")
	}
	if n := strings.Count(string(html), `<svg xmlns="http://www.w3.org/2000/svg" class="sequence"`); n < expected {
		t.Errorf("index.html draws %d diagrams for %d jobs with expected findings", n, expected)
	}
}

// TestReportNoServerExits2: a configuration that gives the checks no
// PostgreSQL is the user's to fix, not harness breakage, and still keeps
// twice from checking: exit 2, a harness-error problem saying config.
func TestReportNoServerExits2(t *testing.T) {
	t.Setenv("TWICE_POSTGRES", "url")
	t.Setenv("TWICE_DATABASE_URL", "")
	code, _, r := twiceReport(t, "./testdata/unexpected")
	if code != report.ExitBroken {
		t.Errorf("exit code = %d, want %d", code, report.ExitBroken)
	}
	if kinds := problemKinds(r); len(kinds) != 1 || kinds[0] != report.ProblemHarnessError {
		t.Fatalf("problems %v, want one %s", kinds, report.ProblemHarnessError)
	}
	msg := r.Summary.Problems[0].Message
	if !strings.Contains(msg, `could not run its check of job "add-points": config: TWICE_POSTGRES=url but TWICE_DATABASE_URL is empty`) || strings.Contains(msg, "internal") {
		t.Errorf("message %q, want the configuration error, not an internal one", msg)
	}
	if !strings.HasPrefix(msg, "[twice] ") || strings.Count(msg, "[twice]") != 1 {
		t.Errorf("message %q, want it tagged once, at its start", msg)
	}
}
