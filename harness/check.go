package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Check runs Run and turns its outcome into test failures: one error that
// gathers every finding, or a fatal "[twice] internal:" error when the check
// itself could not run. Databases kept as evidence are dropped when the
// test passes and logged with their connection strings when it fails.
//
// With Config.ExpectFinding set, findings are logged instead, and the test
// fails only if the job turned out idempotent.
func Check(t testing.TB, job Job, cfg Config) *Result {
	t.Helper()
	return check(t, job, cfg)
}

// tb is the part of testing.TB that check uses, so failure paths can be
// tested with a recording fake.
type tb interface {
	Helper()
	Name() string
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	Failed() bool
	Context() context.Context
}

func check(t tb, job Job, cfg Config) *Result {
	t.Helper()
	cfg, err := withReplay(cfg)
	if err != nil {
		t.Fatalf("%v", err)
		return nil
	}
	ctx, stop := logProgress(t, job.Name)
	res, err := Run(ctx, job, cfg)
	stop()
	if err != nil {
		t.Fatalf("%v", err)
		return nil
	}
	releaseDatabases(t, res)
	logStragglers(t, res)
	if err := writeRecord(t.Name(), rerunLine(t.Name()), res); err != nil {
		t.Errorf("%v", err)
	}
	failed := res.Failed()
	switch {
	case cfg.ExpectFinding == "" && len(failed) > 0:
		t.Errorf("%s", findingMessage(res, rerunLine(t.Name())))
	case cfg.ExpectFinding != "" && len(failed) > 0:
		t.Logf("[twice] expected finding (%s):\n%s", cfg.ExpectFinding, findingMessage(res, rerunLine(t.Name())))
	case cfg.ExpectFinding != "":
		t.Errorf("[twice] job %q is marked not idempotent (%s), but all %d scenarios passed: remove Config.ExpectFinding",
			res.Job, cfg.ExpectFinding, len(res.Scenarios))
	default:
		logPassed(t, res)
	}
	return res
}

// findingMessage gathers every failed scenario of res into one message. A
// difference already shown for an earlier scenario is named, not repeated.
func findingMessage(res *Result, rerun string) string {
	failed := res.Failed()
	var b strings.Builder
	fmt.Fprintf(&b, "[twice] not idempotent: job %q: %d of %d scenarios differ from one clean run\n",
		res.Job, len(failed), len(res.Scenarios))
	shown := map[string]string{} // difference -> the scenario that showed it
	for _, s := range failed {
		fmt.Fprintf(&b, "\n%s (schedule %s):\n", s.Fault, s.Schedule)
		for _, d := range s.Deliveries {
			switch {
			case d.Fault != "" && d.Err != "":
				fmt.Fprintf(&b, "  %s %s, then returned an error: %s\n", d.Delivery, d.Fault, firstLine(d.Err))
			case d.Fault != "":
				fmt.Fprintf(&b, "  %s %s\n", d.Delivery, d.Fault)
			case d.Err != "":
				fmt.Fprintf(&b, "  %s returned an error: %s\n", d.Delivery, firstLine(d.Err))
			}
		}
		var diff strings.Builder
		for _, p := range s.Problems {
			if !strings.HasPrefix(p, "table ") {
				fmt.Fprintf(&diff, "  %s\n", firstLine(p))
			}
		}
		for _, d := range s.StateDiff {
			fmt.Fprintf(&diff, "table %q mismatch (-once +twice):\n%s\n", d.Table, d.Diff)
		}
		if s.EffectDiff != nil {
			for _, l := range s.EffectDiff.Lines {
				fmt.Fprintf(&diff, "%s %s\n", l.Op, l.Text)
			}
		}
		if first, ok := shown[diff.String()]; ok {
			fmt.Fprintf(&b, "  the same difference as %s\n", first)
			continue
		}
		shown[diff.String()] = fmt.Sprintf("%s (schedule %s)", s.Fault, s.Schedule)
		for _, p := range s.Problems {
			if !strings.HasPrefix(p, "table ") {
				fmt.Fprintf(&b, "  %s\n", firstLine(p))
			}
		}
		for _, d := range s.StateDiff {
			fmt.Fprintf(&b, "%s\n", d)
		}
		if s.EffectDiff != nil {
			fmt.Fprintf(&b, "%s\n", s.EffectDiff)
		}
	}
	if len(res.Volatile) > 0 {
		fmt.Fprintf(&b, "\nleft out as volatile (they differ between two clean runs): %s\n", strings.Join(res.Volatile, ", "))
	}
	fmt.Fprintf(&b, "\nrerun: %s", rerun)
	return b.String()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// rerunLine is the go test command that reruns the named test from the
// module root (or the package directory when no go.mod is found).
func rerunLine(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return fmt.Sprintf("go test -run '%s' %s", strings.Join(parts, "/"), packageDir())
}

// packageDir is the test's package directory relative to its module root:
// go test runs a package's tests in that directory.
func packageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil || rel == "." {
				return "."
			}
			return "./" + filepath.ToSlash(rel)
		}
		if filepath.Dir(dir) == dir {
			return "."
		}
	}
}

// oneLine shows a statement on one line, white space folded, cut at 120
// characters.
func oneLine(sql string) string {
	s := strings.Join(strings.Fields(sql), " ")
	if r := []rune(s); len(r) > 120 {
		s = string(r[:117]) + "..."
	}
	return s
}
