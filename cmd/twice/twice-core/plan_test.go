package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/runtwice/twice/internal/report"
)

// writeReportTo writes r where twice report would, and returns the
// directory.
func writeReportTo(t *testing.T, r *report.Report) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "previous")
	if r.Schema == 0 {
		r.Finish()
	}
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// failing lists a report's failing schedules by job: those -rerun-failed
// runs again.
func failing(r *report.Report) map[string][]string {
	out := map[string][]string{}
	for _, j := range r.Jobs {
		if j.Outcome != report.OutcomeFinding && j.Outcome != report.OutcomeFlaky {
			continue
		}
		for _, f := range j.Findings {
			if f.Outcome == report.OutcomeFinding || f.Outcome == report.OutcomeFlaky {
				out[j.Name] = append(out[j.Name], f.Fault+" "+f.Schedule)
			}
		}
	}
	return out
}

// twice report -rerun-failed runs exactly the schedules that failed in a
// previous report, in their packages and tests: not the passing ones,
// not the jobs whose findings were expected.
func TestReportRerunFailed(t *testing.T) {
	_, _, whole := twiceReport(t, shardedPackages...)
	want := failing(whole)
	if len(want) == 0 {
		t.Fatal("the sharded packages failed nowhere: nothing to rerun")
	}
	prev := writeReportTo(t, whole)

	out := filepath.Join(t.TempDir(), "rerun")
	var stdout, stderr bytes.Buffer
	code := run([]string{"report", "-rerun-failed", prev, "-o", out}, &stdout, &stderr)
	t.Logf("twice report -rerun-failed: exit %d\n%s%s", code, stderr.String(), stdout.String())
	if code != whole.ExitCode {
		t.Errorf("exit %d, the run it reran %d", code, whole.ExitCode)
	}
	r := readReport(t, out)
	if r.RerunOf != prev {
		t.Errorf("rerun_of = %q, want %q", r.RerunOf, prev)
	}
	if !strings.Contains(stdout.String(), "(only the schedules that failed in "+prev+")") {
		t.Errorf("the headline does not say the run is a rerun:\n%s", stdout.String())
	}
	got := failing(r)
	ran := map[string]int{}
	for _, j := range r.Jobs {
		ran[j.Name] = j.Scenarios
	}
	for name, scheds := range want {
		slices.Sort(scheds)
		slices.Sort(got[name])
		if !slices.Equal(scheds, got[name]) {
			t.Errorf("job %s failed under %q, and the rerun under %q", name, scheds, got[name])
		}
		if ran[name] != len(scheds) {
			t.Errorf("job %s: the rerun ran %d scenarios, want the %d that failed", name, ran[name], len(scheds))
		}
	}
	for _, j := range r.Jobs {
		if _, ok := want[j.Name]; !ok && j.Scenarios > 0 {
			t.Errorf("job %s did not fail, and the rerun ran %d of its scenarios", j.Name, j.Scenarios)
		}
	}

	// A report with nothing failing has nothing to rerun: exit 0, no
	// report written.
	calm := writeReportTo(t, &report.Report{Command: "go test -json ./..."})
	stdout.Reset()
	none := filepath.Join(t.TempDir(), "none")
	if code := run([]string{"report", "-rerun-failed", calm, "-o", none}, &stdout, &stderr); code != report.ExitOK {
		t.Errorf("rerun of a passing report: exit %d, want 0", code)
	}
	if !strings.Contains(stdout.String(), "has no failing schedule: nothing to rerun") {
		t.Errorf("rerun of a passing report says %q", stdout.String())
	}
	if _, err := os.Stat(none); !os.IsNotExist(err) {
		t.Errorf("rerun of a passing report wrote %s (%v)", none, err)
	}
}

// The shards of a run dealt by the costs of a previous one (-timings),
// merged, are still the whole run's report.
func TestReportShardsByCostMergeToWholeRun(t *testing.T) {
	_, _, whole := twiceReport(t, shardedPackages...)
	timings := writeReportTo(t, whole)
	shardsMergeToWholeRun(t, report.ExitFindings, []string{"-timings", timings}, shardedPackages...)
}

// twice plan prints a GitHub Actions matrix: an object whose include
// lists at most 256 jobs, each a map of scalars; with timings, each says
// the load its shard is dealt, and the loads are even.
func TestPlanMatrix(t *testing.T) {
	r := &report.Report{Command: "go test -json ./...", Jobs: []report.Job{
		{Name: "a", Package: "x/a", Test: "TestA", Runs: 1, Cells: []report.Cell{{Fault: "run-twice", Scenarios: 1, Duration: 900}, {Fault: "crash-mid-job", Scenarios: 6, Duration: 600}}},
		{Name: "b", Package: "x/b", Test: "TestB", Runs: 1, Cells: []report.Cell{{Fault: "concurrent-delivery", Scenarios: 9, Duration: 900}}},
	}}
	timings := writeReportTo(t, r)
	for _, tc := range []struct {
		args  []string
		n     int
		loads bool
	}{
		{[]string{"plan", "-shards", "3"}, 3, false},
		{[]string{"plan", "-shards", "256"}, 256, false},
		{[]string{"plan", "-shards", "3", "-timings", timings}, 3, true},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tc.args, &stdout, &stderr); code != 0 {
			t.Fatalf("twice %q: exit %d: %s", tc.args, code, stderr.String())
		}
		var m map[string][]map[string]any
		if err := json.Unmarshal(stdout.Bytes(), &m); err != nil {
			t.Fatalf("twice %q printed no matrix: %v\n%s", tc.args, err, stdout.String())
		}
		if len(m) != 1 || len(m["include"]) != tc.n || tc.n > maxMatrix {
			t.Fatalf("twice %q: %d keys, %d jobs; want include with %d", tc.args, len(m), len(m["include"]), tc.n)
		}
		var loads []float64
		for i, e := range m["include"] {
			for k, v := range e {
				switch v.(type) {
				case string, float64, bool:
				default:
					t.Errorf("entry %d: %s is %T, not a scalar a matrix holds", i, k, v)
				}
			}
			if want := fmt.Sprintf("%d/%d", i+1, tc.n); e["shard"] != want {
				t.Errorf("entry %d: shard %v, want %s", i, e["shard"], want)
			}
			if l, ok := e["load_ms"].(float64); ok {
				loads = append(loads, l)
			}
		}
		if tc.loads && (len(loads) != 3 || slices.Max(loads) > 1.3*slices.Min(loads)) {
			t.Errorf("twice %q: loads %v, want 3 within 1.3x", tc.args, loads)
		}
	}
	for _, args := range [][]string{
		{"plan", "-shards", "0"},
		{"plan", "-shards", "257"},
		{"plan", "-shards", "3", "./..."},
		{"plan", "-shards", "3", "-timings", filepath.Join(t.TempDir(), "none")},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != report.ExitBroken || !strings.HasPrefix(stderr.String(), "[twice] ") {
			t.Errorf("twice %q: exit %d, stderr %q; want 2 and a message", args, code, stderr.String())
		}
	}
}

// A service whose registry holds a kind no sample checks: the report has
// a "workers without a check" section naming it, in every format, and the
// test's failure.
func TestReportWorkersWithoutACheck(t *testing.T) {
	code, stdout, r := twiceReport(t, "./testdata/registered")
	if code != report.ExitFindings {
		t.Errorf("exit %d, want %d: the test fails", code, report.ExitFindings)
	}
	gs := r.WithoutCheckWorkers()
	if len(gs) != 1 || gs[0].Registry != "test registry" || !slices.Equal(gs[0].Unchecked, []string{"reset-points"}) || len(gs[0].Kinds) != 2 || gs[0].Test != "TestService" {
		t.Fatalf("workers without a check: %+v", gs)
	}
	if !strings.Contains(stdout, "[twice] workers without a check: the test registry of github.com/runtwice/twice/cmd/twice/twice-core/testdata/registered TestService registers reset-points, which no sample checks") {
		t.Errorf("stdout does not name the worker without a check:\n%s", stdout)
	}
	if md := r.Markdown(); !strings.Contains(md, "## Workers without a check") || !strings.Contains(md, "`reset-points`") {
		t.Errorf("summary.md lacks the section:\n%s", md)
	}
	if len(r.Jobs) != 1 || r.Jobs[0].Test != "TestService/set-points" || r.Jobs[0].Outcome != report.OutcomeIdempotent {
		t.Errorf("jobs: %+v; want the sample's check, idempotent", r.Jobs)
	}
}

// A cell's time is its first run's and its scenarios the distinct
// schedules, whatever -count was: a schedule costs their quotient. The
// checks are dealt in order of package, test and job, each on top of the
// loads the ones before left; a package go list no longer finds is left
// out.
func TestDealByCostPerSchedule(t *testing.T) {
	prev := &report.Report{Jobs: []report.Job{
		{Name: "b", Package: "x/b", Test: "TestB", Runs: 3, Cells: []report.Cell{{Fault: "run-twice", Scenarios: 3, Duration: 900}}},
		{Name: "a", Package: "x/a", Test: "TestA", Runs: 1, Cells: []report.Cell{{Fault: "crash-mid-job", Scenarios: 2, Duration: 100}}},
		{Name: "gone", Package: "x/gone", Test: "TestGone", Runs: 1, Cells: []report.Cell{{Fault: "run-twice", Scenarios: 1, Duration: 5}}},
	}}
	p, loads := dealByCost(prev, "prev", 2, map[string]string{"x/a": "/src/a", "x/b": "/src/b"})
	if len(p.Checks) != 2 || p.Checks[0].Job != "a" || p.Checks[1].Job != "b" || p.Checks[1].Dir != "/src/b" {
		t.Fatalf("checks %+v; want a then b, gone left out", p.Checks)
	}
	if got := p.Checks[1].Costs["run-twice"]; got != 300 {
		t.Errorf("b's run-twice costs %v a schedule, want 900/3", got)
	}
	if got := p.Checks[1].Loads; !slices.Equal(got, []float64{50, 50}) {
		t.Errorf("b starts on loads %v, want a's two 50s, one a shard", got)
	}
	if !slices.Equal(loads, []float64{650, 350}) {
		t.Errorf("final loads %v, want 650 and 350", loads)
	}
}
