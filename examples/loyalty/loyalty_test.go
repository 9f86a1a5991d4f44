package loyalty_test

import (
	"context"
	_ "embed"
	"testing"

	"github.com/runtwice/twice/examples/loyalty"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
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
	cfg.ExpectPattern = result.IncrementWithoutRecord
	harness.Check(t, byIncrement, cfg)
}
