package record_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/internal/record"
)

// A record comes back as it was written: the schedule through its text
// form, steps, problems and the status as values.
func TestWriteReadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(record.DirEnv, dir)
	sched, err := faults.Parse("j1a1w1!crash:2 > +30s j1a2w2 order 1,2")
	if err != nil {
		t.Fatal(err)
	}
	res := &record.Result{
		Job: "pay", Status: record.Finding,
		Steps: []faults.Step{{SQL: "UPDATE t SET n = n + 1", CommitPoint: true}, {SQL: "payment key=k amount=5", Effect: "payment", Key: "k"}},
		Scenarios: []record.Scenario{{
			Fault: faults.NameCrashMidJob, Schedule: sched, Verdict: record.NotIdempotent,
			Problems:   []record.Problem{{Kind: record.StateDiffers, Table: "t"}, {Kind: record.DidNotComplete, Detail: "job twice-job-1: ..."}},
			Deliveries: []record.DeliveryOutcome{{Delivery: sched.Deliveries[0], JobID: "twice-job-1", Attempt: 1, Worker: 1}},
			Order:      []int{1, 2},
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
	if diff := cmp.Diff(res, recs[0].Result, cmpopts.EquateEmpty(), cmpopts.IgnoreFields(faults.Schedule{}, "Fault")); diff != "" {
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
	if want := "has record version 1, this twice reads 2"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q lacks %q", err, want)
	}
}
