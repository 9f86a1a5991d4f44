package loyalty_test

import (
	"context"
	_ "embed"
	"strings"
	"testing"

	"github.com/runtwice/twice/examples/loyalty"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/internal/golden"
	"github.com/runtwice/twice/internal/recordtb"
)

//go:embed schema.sql
var schema string

// rewardOrder9812 is the seed's job: reward order 9812 of customer 77.
func rewardOrder9812(name string, reward func(context.Context, *harness.Delivery) error) harness.Job {
	return harness.Job{Name: name, Handler: reward}
}

var (
	byIncrement = rewardOrder9812("reward-by-increment", func(ctx context.Context, d *harness.Delivery) error {
		return loyalty.RewardByIncrement(ctx, d.DB, 77, 9812)
	})
	withLedger = rewardOrder9812("reward-with-ledger", func(ctx context.Context, d *harness.Delivery) error {
		return loyalty.RewardWithLedger(ctx, d.DB, 77, 9812)
	})
	byRecompute = rewardOrder9812("reward-by-recompute", func(ctx context.Context, d *harness.Delivery) error {
		return loyalty.RewardByRecompute(ctx, d.DB, 77, 9812)
	})
)

func config() harness.Config {
	return harness.Config{Setup: []harness.Setup{harness.SQL(schema)}}
}

func TestRewardWithLedger(t *testing.T) {
	harness.Check(t, withLedger, config())
}

func TestRewardByRecompute(t *testing.T) {
	harness.Check(t, byRecompute, config())
}

// TestRewardByIncrement documents the broken job: twice finds it, so the
// check passes while the finding is expected.
func TestRewardByIncrement(t *testing.T) {
	cfg := config()
	cfg.ExpectFinding = "adds 50 points on every delivery"
	harness.Check(t, byIncrement, cfg)
}

// TestRewardByIncrementFinding pins what a developer reads when the broken
// job is checked without the mark.
func TestRewardByIncrementFinding(t *testing.T) {
	rec := recordtb.New(t)
	var res *harness.Result
	rec.Run(func(tb testing.TB) { res = harness.Check(tb, byIncrement, config()) })

	errs := rec.Errors()
	if len(errs) != 1 {
		t.Fatalf("Check reported %d errors, want 1: %q", len(errs), errs)
	}
	if res.Idempotent() {
		t.Errorf("Result.Idempotent() = true, want false")
	}
	if !strings.HasPrefix(errs[0], "[twice] not idempotent: ") {
		t.Errorf("error does not start with the finding tag:\n%s", errs[0])
	}
	golden.Equal(t, "increment-finding.txt", errs[0])
}
