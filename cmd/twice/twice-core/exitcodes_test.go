package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/runtwice/twice/internal/report"
)

// TestReplayExitCodes: replay exits 0 when the job is idempotent under
// the schedule, 1 when it is not or the test failed, 2 when the tool
// could not check, each with a sentence of its own.
func TestReplayExitCodes(t *testing.T) {
	for _, tt := range []struct {
		name, pkg, run string
		code           int
		want           []string // in stdout or stderr
		not            []string
	}{
		{name: "no such package", pkg: "./nonexistent", run: "^TestX$", code: 2,
			want: []string{"./nonexistent matches no package", "directory not found"},
			not:  []string{"the test failed", "diff"}},
		{name: "build failure", pkg: "./testdata/nocompile", run: "^TestX$", code: 2,
			want: []string{"declared and not used", "nocompile does not compile (the errors are above), so nothing was replayed"}},
		{name: "config error", pkg: "./testdata/configerror", run: "^TestIgnoresMissingTable$", code: 2,
			want: []string{`could not run its check of job "mark-shipped"`, `no table "order_audit"`, "nothing was replayed"},
			not:  []string{"idempotent under"}},
		{name: "failing test around a passing check", pkg: "./testdata/failaround", run: "^TestFailsAroundCheck$", code: 1,
			// The passing line is the user's test's, at its Check call.
			want: []string{`job "mark-shipped" is idempotent under 'j1a1w1 > j1a2w2'`, "failed, and not with a finding of twice: the invoice total is 0, want 50",
				`failaround_test.go:15: [twice] ok: job "mark-shipped"`},
			not: []string{"holds the diff", "finding of twice: [twice] ok", "verbose.go:"}},
		{name: "finding", pkg: "./testdata/unexpected", run: "^TestAddPoints$", code: 1,
			want: []string{`job "add-points" is not idempotent under 'j1a1w1 > j1a2w2'; the diff is above`, `"points": int64(220)`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run([]string{"replay", "j1a1w1 > j1a2w2", tt.pkg, "-run", tt.run}, &stdout, &stderr)
			out := stdout.String() + stderr.String()
			t.Logf("twice replay: exit %d\n%s", code, out)
			if code != tt.code {
				t.Errorf("exit code = %d, want %d", code, tt.code)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q", w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(out, n) {
					t.Errorf("output has %q", n)
				}
			}
		})
	}
}

// TestReportNoSuchPackage: a path that names no package is said to be
// one, not a package that does not compile, and nothing counts it.
func TestReportNoSuchPackage(t *testing.T) {
	code, out, r := twiceReport(t, "./nonexistent")
	if code != report.ExitBroken {
		t.Errorf("exit code = %d, want %d", code, report.ExitBroken)
	}
	if got := problemKinds(r); len(got) != 1 || got[0] != report.ProblemNoPackage {
		t.Errorf("problems = %v, want one %s", got, report.ProblemNoPackage)
	}
	if !strings.Contains(out, "./nonexistent matches no package") {
		t.Errorf("output does not say the path matches no package:\n%s", out)
	}
	if strings.Contains(out, "does not compile") {
		t.Errorf("output calls the missing path a package that does not compile:\n%s", out)
	}
}

// TestReportFailingTestAroundCheck: a test that fails after its check
// passed is a failing test (exit 1), named by its own failure, and not
// called not idempotent.
func TestReportFailingTestAroundCheck(t *testing.T) {
	code, out, r := twiceReport(t, "./testdata/failaround")
	if code != report.ExitFindings {
		t.Errorf("exit code = %d, want %d", code, report.ExitFindings)
	}
	if len(r.Jobs) != 1 || r.Jobs[0].Outcome != report.OutcomeIdempotent {
		t.Fatalf("jobs = %+v, want one idempotent", r.Jobs)
	}
	if want := "failed, and not with a finding of twice: the invoice total is 0, want 50"; !strings.Contains(out, want) {
		t.Errorf("output lacks %q", want)
	}
	if strings.Contains(out, "[twice] not idempotent") {
		t.Errorf("the headline calls an idempotent job's failing test not idempotent:\n%s", out)
	}
}
