package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/record"
	"github.com/runtwice/twice/internal/render"
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
		fail(t, job, rerunLine(t.Name()), err)
		return nil
	}
	ctx, stop := logProgress(t, job.Name)
	res, err := Run(ctx, job, cfg)
	stop()
	if err != nil {
		fail(t, job, rerunLine(t.Name()), err)
		return nil
	}
	releaseDatabases(t, res, record.Record{Test: t.Name(), Rerun: rerunLine(t.Name()), Result: &res.Result})
	logStragglers(t, res)
	logLeftOpen(t, res)
	switch res.Status {
	case record.Finding:
		t.Errorf("%s", render.Finding(&res.Result, rerunLine(t.Name())))
	case record.ExpectedFinding:
		t.Logf("[twice] expected finding (%s):\n%s", cfg.ExpectFinding, render.Finding(&res.Result, rerunLine(t.Name())))
	default:
		if cfg.ExpectFinding != "" && res.Shard != nil {
			// Another shard may hold the failing scenarios; the merged
			// report shows the job's verdict.
			t.Logf("[twice] job %q is marked not idempotent (%s), and none of the %d scenarios of shard %s differs", res.Job, cfg.ExpectFinding, len(res.Scenarios), res.Shard)
			break
		}
		if cfg.ExpectFinding != "" {
			t.Errorf("[twice] job %q is marked not idempotent (%s), but all %d scenarios passed: remove Config.ExpectFinding",
				res.Job, cfg.ExpectFinding, len(res.Scenarios))
			break
		}
		logPassed(t, res)
	}
	return res
}

// fail ends the test with err, the check's own breakage, and tells the
// runner so: its verdict on the job is neither a pass nor a finding.
func fail(t tb, job Job, rerun string, err error) {
	t.Helper()
	status := record.InternalError
	if blame.IsUser(err) {
		status = record.UserError
	}
	rec := record.Record{Test: t.Name(), Rerun: rerun, Error: err.Error(),
		Result: &record.Result{Job: job.Name, Status: status}}
	if werr := record.Write(rec); werr != nil {
		t.Errorf("%v", werr)
	}
	t.Fatalf("%v", err)
}

// releaseDatabases drops the databases res kept as evidence when the test
// passes, and keeps them, logging how to connect, when it fails; then it
// writes rec, the check's record for the runner. Whether the test fails is
// known only at its end, and keeping renames (and, on a server that dies
// with the binary, dumps) the databases: a record written before would
// name databases that no longer exist. With nothing kept, rec is written
// at once.
func releaseDatabases(t tb, res *Result, rec record.Record) {
	t.Helper()
	if len(res.kept) == 0 {
		if err := record.Write(rec); err != nil {
			t.Errorf("%v", err)
		}
		return
	}
	t.Cleanup(func() {
		// Its lines point at the user's Check or Explore call.
		t.Helper()
		ctx := context.Background()
		if !t.Failed() || !keepEvidence() {
			if err := res.DropDatabases(ctx); err != nil {
				t.Errorf("[twice] internal: dropping the databases of failed scenarios: %v", err)
			}
		} else {
			for _, k := range res.keepDatabases(ctx) {
				t.Logf("[twice] %s", k)
			}
		}
		if err := record.Write(rec); err != nil {
			t.Errorf("%v", err)
		}
	})
}

// rerunLine is the go test command that reruns the named test from the
// module root (or the package directory when no go.mod is found).
func rerunLine(name string) string {
	return fmt.Sprintf("go test -run '%s' %s", render.TestPattern(name), packageDir())
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
