package bounces_test

import (
	"context"
	"testing"

	"github.com/runtwice/twice/examples/bounces"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

var (
	record = harness.Job{Name: "record-bounce", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return bounces.Record(ctx, d.DB, 7001, "mailbox full")
	}}
	recordUnique = harness.Job{Name: "record-bounce-unique", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return bounces.RecordUnique(ctx, d.DB, 7001, "mailbox full")
	}}

	config       = harness.Config{Setup: []harness.Setup{harness.SQL(bounces.Schema)}}
	configUnique = harness.Config{Setup: []harness.Setup{harness.SQL(bounces.SchemaUnique)}}
)

func TestRecord(t *testing.T) {
	cfg := config
	cfg.ExpectFinding = "two overlapping deliveries both see no bounce, both insert, and suppress the message"
	cfg.ExpectPattern = result.CheckThenAct
	res := harness.Check(t, record, cfg)
	if res.Shard != nil {
		return // the assertions below are about the whole check
	}
	for _, s := range res.Failed() {
		if len(s.Schedule.Holds) == 0 {
			t.Errorf("%s %s failed without an overlapped statement; only holding a commit can show this race", s.Fault, s.Schedule)
		}
	}
}

func TestRecordUnique(t *testing.T) {
	res := harness.Check(t, recordUnique, configUnique)
	if res.Shard != nil {
		return
	}
	held, waited := 0, 0
	for _, s := range res.Scenarios {
		if len(s.Schedule.Holds) > 0 {
			held++
			if s.Schedule.Order[0] == 1 && s.Schedule.Order[1] == 2 {
				// The second insert waited for the held one's commit.
				waited += s.LockWaits
			}
		}
	}
	if held == 0 || waited == 0 {
		t.Errorf("%d scenarios overlapped the two inserts, with %d lock waits; want the second insert to wait for the first's commit", held, waited)
	}
}

// Whole statements in turn never show the race: without the overlapped
// statements the check passes the racy job.
func TestRecordInTurnPasses(t *testing.T) {
	res, err := harness.Run(t.Context(), record, harness.Config{
		Setup:  config.Setup,
		Faults: []faults.Fault{faults.ConcurrentDelivery()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	inTurn, overlapped := 0, 0
	for _, s := range res.Scenarios {
		switch {
		case s.Verdict == result.Idempotent:
		case len(s.Schedule.Holds) > 0:
			overlapped++
		default:
			inTurn++
		}
	}
	// One shard of a split run (twice report -shard) may be dealt none
	// of the overlapped schedules.
	if inTurn != 0 || (overlapped == 0 && res.Shard == nil) {
		t.Errorf("failed scenarios: %d in turn, %d overlapped; want 0 in turn and some overlapped", inTurn, overlapped)
	}
}
