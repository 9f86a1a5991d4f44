package processedjobs_test

import (
	"context"
	"testing"

	"github.com/runtwice/twice/examples/processedjobs"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

var (
	config = harness.Config{Setup: []harness.Setup{harness.SQL(processedjobs.Schema)}}

	byJobID = harness.Job{Name: "processed-by-job-id", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return processedjobs.ByJobID(ctx, d.DB, d.JobID, 77, 9812)
	}}
	// byBusinessKey reaches the database through database/sql, on the
	// delivery's own *sql.DB, which the harness opens and closes.
	byBusinessKey = harness.Job{Name: "processed-by-business-key", Handler: func(ctx context.Context, d *harness.Delivery) error {
		db, err := d.SQL()
		if err != nil {
			return err
		}
		return processedjobs.ByBusinessKey(ctx, db, 77, 9812)
	}}
)

func TestByBusinessKey(t *testing.T) {
	harness.Check(t, byBusinessKey, config)
}

// TestByJobIDSurvivesRedelivery: the same job ID delivered again is skipped.
func TestByJobIDSurvivesRedelivery(t *testing.T) {
	cfg := config
	cfg.Faults = []faults.Fault{faults.RunTwice()}
	harness.Check(t, byJobID, cfg)
}

// TestByJobID: a producer retry carries a new job ID, so the reward is
// paid twice, whether the copies run one after the other or together;
// every redelivery of one job ID is skipped.
func TestByJobID(t *testing.T) {
	cfg := config
	cfg.ExpectFinding = "a producer retry carries a new job ID"
	cfg.ExpectPattern = result.KeyPerEnqueue
	res := harness.Check(t, byJobID, cfg)
	for _, s := range res.Scenarios {
		want := result.Idempotent
		if s.Fault == faults.NameProducerRetry || s.Fault == faults.NameConcurrentProducerRetry {
			want = result.NotIdempotent
		}
		if s.Verdict != want {
			t.Errorf("scenario %s: Verdict = %s, want %s", s.Fault, s.Verdict, want)
		}
	}
}
