package record_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/record"
)

// A record comes back as it was written: the schedule through its text
// form, steps with their fates, problems and the status as values.
func TestWriteReadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(record.DirEnv, dir)
	sched, err := faults.Parse("j1a1w1!crash:2 > +30s j1a2w2 order 1,2")
	if err != nil {
		t.Fatal(err)
	}
	res := &result.Result{
		Job: "pay", Outcome: result.OutcomeFinding,
		Steps: []faults.Step{{SQL: "UPDATE t SET n = n + 1", CommitPoint: true}, {SQL: "payment key=k amount=5", Effect: "payment", Key: "k"}},
		Scenarios: []result.Scenario{{
			Fault: faults.NameCrashMidJob, Schedule: sched, Verdict: result.NotIdempotent,
			Problems: []result.Problem{{Kind: result.StateDiffers, Table: "t"}, {Kind: result.DidNotComplete, Detail: "job twice-job-1: ..."}},
			Deliveries: []result.DeliveryOutcome{{
				Delivery: sched.Deliveries[0], JobID: "twice-job-1", Attempt: 1, Worker: 1,
				Steps: []result.StepTaken{
					{Step: faults.Step{SQL: "UPDATE t SET n = n + 1", CommitPoint: true}, Fate: result.Ran},
					{Step: faults.Step{SQL: "payment key=k amount=5", Effect: "payment", Key: "k"}, Fate: result.CrashedBefore},
				},
			}},
			Order:     []int{1, 2},
			DumpError: result.NewError(os.ErrPermission),
		}},
	}
	if err := record.Write(record.Record{Test: "TestPay", Rerun: "go test -run '^TestPay$' .", Result: res}); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) != 1 {
		t.Fatalf("records written: %q, want one", files)
	}
	recs, err := record.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("read %d records, want 1", len(recs))
	}
	if diff := cmp.Diff(res, recs[0].Result, cmpopts.EquateEmpty(), cmpopts.IgnoreUnexported(result.Error{}), cmpopts.IgnoreFields(faults.Schedule{}, "Fault")); diff != "" {
		t.Errorf("record mismatch (-wrote +read):\n%s", diff)
	}
}

// A record of another version is refused with a message that says what
// to do, not decoded into nonsense.
func TestReadRefusesOtherVersion(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.json"), []byte(`{"version": 1, "result": {"Scenarios": [{"Schedule": "j1a1w1", "Order": "1"}]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := record.Read(dir)
	if err == nil {
		t.Fatal("no error for a version 1 record")
	}
	if want := "has record version 1, this twice reads 3"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q lacks %q", err, want)
	}
}

// A result whose warning has no schedule (two clean runs that disagree)
// reads back; and a file that is not a record costs only its own check:
// ReadAll returns the others and names it, with its test (issue 37).
func TestReadAllKeepsTheOthers(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(record.DirEnv, dir)
	res := &result.Result{Job: "once", Outcome: result.OutcomeIdempotent,
		Warnings: []result.Warning{{Kind: result.CleanRunsDisagree, Disagreement: &result.Disagreement{Steps: [2]int{1, 0}, StepAt: 1}}}}
	if err := record.Write(record.Record{Test: "TestOnce", Result: res}); err != nil {
		t.Fatal(err)
	}
	bad := `{"version": 3, "dir": "/src/jobs", "test": "TestBroken", "result": {"Scenarios": [{"Schedule": "nonsense"}]}}`
	if err := os.WriteFile(filepath.Join(dir, "broken.json"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	recs, unreadable, err := record.ReadAll(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Test != "TestOnce" || len(recs[0].Result.Warnings) != 1 || recs[0].Result.Warnings[0].Kind != result.CleanRunsDisagree {
		t.Errorf("records = %+v, want TestOnce with its warning", recs)
	}
	if len(unreadable) != 1 || unreadable[0].File != "broken.json" || unreadable[0].Test != "TestBroken" || unreadable[0].Dir != "/src/jobs" ||
		!strings.Contains(blame.Message(unreadable[0].Err), "[twice] internal: harness result broken.json is not a record") {
		t.Errorf("unreadable = %+v, want broken.json of TestBroken", unreadable)
	}
	if _, err := record.Read(dir); err == nil {
		t.Error("Read took a directory holding a file that is not a record")
	}
}
