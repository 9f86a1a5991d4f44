package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/runtwice/twice/internal/longtest"
	"github.com/runtwice/twice/internal/report"
)

// shardedPackages split unevenly three ways: one job has schedules of
// four faults and findings alike across shards, one has a single
// schedule, and one has an unexpected finding in two shards only.
var shardedPackages = []string{"./testdata/sharded", "./testdata/unexpected"}

// The shards' reports, merged, are the whole run's report: the same jobs,
// cells, verdicts, findings in the same order with the same same_as, the
// same problems and exit code. Only timings and the host may differ.
func TestReportShardsMergeToWholeRun(t *testing.T) {
	merged := shardsMergeToWholeRun(t, report.ExitFindings, nil, shardedPackages...)
	// The merge is sure to have had something to join.
	var sameAs, scenarios int
	for _, j := range merged.Jobs {
		scenarios += j.Scenarios
		for _, f := range j.Findings {
			if f.SameAs != "" {
				sameAs++
			}
		}
	}
	if sameAs == 0 || scenarios < 9 {
		t.Errorf("merged %d scenarios with %d findings named the same as another: too little to show the merge", scenarios, sameAs)
	}
}

// The same over an example under the default faults: many faults, some
// with fewer schedules than shards, effects, expected findings.
func TestReportExampleShardsMergeToWholeRun(t *testing.T) {
	longtest.Skip(t, "runs an example's checks four times")
	shardsMergeToWholeRun(t, report.ExitOK, nil, "../../../examples/loyalty")
}

// shardsMergeToWholeRun runs twice report on pkgs whole, then as three
// shards, merges the shards' reports, and compares the merged report with
// the whole one, ignoring timings and the host. Each shard runs with the
// flags shardFlags too. It returns the merged report.
func shardsMergeToWholeRun(t *testing.T, wantCode int, shardFlags []string, pkgs ...string) *report.Report {
	t.Helper()
	wholeCode, _, whole := twiceReport(t, pkgs...)
	if wholeCode != wantCode {
		t.Fatalf("whole run: exit %d, want %d", wholeCode, wantCode)
	}
	if whole.Shard != nil {
		t.Errorf("whole run's report names shard %s", whole.Shard)
	}

	var dirs []string
	for i := 1; i <= 3; i++ {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("report-%d", i))
		var stdout, stderr bytes.Buffer
		args := append([]string{"report", "-shard", fmt.Sprintf("%d/3", i), "-o", dir}, shardFlags...)
		code := run(append(args, pkgs...), &stdout, &stderr)
		t.Logf("twice report -shard %d/3: exit %d\n%s%s", i, code, stderr.String(), stdout.String())
		r := readReport(t, dir)
		if r.Shard == nil || *r.Shard != (report.Shard{Index: i, Count: 3}) {
			t.Errorf("shard %d/3's report names shard %v", i, r.Shard)
		}
		for _, j := range r.Jobs {
			if len(j.Cells) == 0 || j.Schedules == 0 {
				t.Errorf("shard %d/3: job %s has %d cells and %d schedules; a shard's job lists every fault and counts the whole check's schedules", i, j.Name, len(j.Cells), j.Schedules)
			}
		}
		dirs = append(dirs, dir)
	}

	out := filepath.Join(t.TempDir(), "merged")
	var stdout, stderr bytes.Buffer
	// Shards in any order, given as directories or report.json files.
	code := run([]string{"report", "--merge", "-o", out, dirs[2], filepath.Join(dirs[0], report.FileJSON), dirs[1]}, &stdout, &stderr)
	t.Logf("twice report --merge: exit %d\n%s%s", code, stderr.String(), stdout.String())
	if code != wholeCode {
		t.Errorf("merge exited %d, the whole run %d", code, wholeCode)
	}
	merged := readReport(t, out)
	ignore := cmp.Options{
		cmpopts.IgnoreFields(report.Report{}, "Started", "Duration", "Host", "Twice"),
		cmpopts.IgnoreFields(report.Job{}, "Duration"),
		cmpopts.IgnoreFields(report.Cell{}, "Duration"),
		cmpopts.IgnoreFields(report.Package{}, "Duration"),
		cmpopts.EquateEmpty(),
	}
	if diff := cmp.Diff(whole, merged, ignore); diff != "" {
		t.Errorf("merged shards mismatch (-whole +merged):\n%s", diff)
	}
	for _, f := range []string{report.FileHTML, report.FileMarkdown, report.FileJUnit} {
		if len(merged.Jobs) > 0 && !bytes.Contains(mustRead(t, filepath.Join(out, f)), []byte(merged.Jobs[0].Test)) {
			t.Errorf("merged %s does not show %s", f, merged.Jobs[0].Test)
		}
	}
	return merged
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// A bad shard, or a merge without shards, stops twice report before it
// runs anything, with exit 2 and a message that says what it wants.
func TestReportShardMisuse(t *testing.T) {
	whole := filepath.Join(t.TempDir(), "whole")
	r := &report.Report{Command: "go test -json ./..."}
	r.Finish()
	if err := r.Write(whole); err != nil {
		t.Fatal(err)
	}
	shardReport := filepath.Join(t.TempDir(), "shard")
	r.Shard = &report.Shard{Index: 1, Count: 2}
	if err := r.Write(shardReport); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  string // TWICE_SHARD
		args []string
		want string
	}{
		{"counted from 0", "", []string{"report", "-shard", "0/3", "./testdata/plain"}, `[twice] -shard: "0/3" names shard 0 of 3; shards count from 1 to n: want 1/3 to 3/3`},
		{"past the last", "", []string{"report", "-shard", "4/3"}, `[twice] -shard: "4/3" names shard 4 of 3`},
		{"not numbers", "", []string{"report", "-shard=x/y"}, `[twice] -shard: "x/y" is not a shard; want i/n`},
		{"no shards", "", []string{"report", "-twice.shard=2/0"}, `[twice] -twice.shard: "2/0" splits the checks into 0 shards`},
		{"from the environment", "5", []string{"report"}, `[twice] TWICE_SHARD: "5" is not a shard`},
		{"two shards", "", []string{"report", "-shard", "1/3", "-twice.shard=2/3"}, "[twice] -shard 1/3 and -twice.shard=2/3 disagree; give one"},
		{"merge nothing", "", []string{"report", "-merge"}, "[twice] -merge needs the report.json of every shard"},
		{"merge a shard", "", []string{"report", "-merge", "-shard", "1/2", whole}, "[twice] -merge joins the reports of every shard; it takes no -shard"},
		{"merge a whole run", "", []string{"report", "-merge", whole}, "is not a shard's report: write each shard's with twice report -shard i/n"},
		{"merge nothing there", "", []string{"report", "-merge", filepath.Join(whole, "nosuch.json")}, "[twice] cannot read a shard's report"},
		{"timings unsharded", "", []string{"report", "-timings", whole, "./testdata/plain"}, "deals the schedules to shards, and this run is not one; give -shard i/n"},
		{"timings of a shard", "", []string{"report", "-shard", "1/2", "-timings", shardReport}, "is the report of shard 1/2, which timed only its own schedules; join the shards' reports"},
		{"timings and rerun", "", []string{"report", "-shard", "1/2", "-timings", whole, "-rerun-failed", whole}, "-rerun-failed runs the failing schedules of one report; it takes no -timings"},
		{"rerun with packages", "", []string{"report", "-rerun-failed", whole, "./testdata/plain"}, "picks the packages and tests that failed; it takes no packages and no -run"},
		{"rerun nothing there", "", []string{"report", "-rerun-failed", filepath.Join(whole, "nosuch")}, "[twice] cannot read the report to rerun"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("TWICE_SHARD", tc.env)
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != report.ExitBroken {
				t.Errorf("twice %q: exit %d, want %d", tc.args, code, report.ExitBroken)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("twice %q: stderr %q lacks %q", tc.args, stderr.String(), tc.want)
			}
			assertTaggedOnce(t, stderr.String())
		})
	}
}
