package points_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	twiceriver "github.com/runtwice/twice/adapters/river"
	"github.com/runtwice/twice/adapters/river/example/points"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/internal/longtest"
)

// verdicts is each scenario's verdict by its schedule.
func verdicts(t *testing.T, job harness.Job, c harness.Config) map[string]string {
	t.Helper()
	res, err := harness.Run(context.Background(), job, c)
	require.NoError(t, err)
	defer func() { _ = res.DropDatabases(context.Background()) }()
	out := map[string]string{}
	for _, s := range res.Scenarios {
		out[string(s.Fault)+" "+s.Schedule.String()] = string(s.Verdict)
	}
	return out
}

// The adapter's example checks, under the default matrix, give the same
// verdict for every schedule on each of 20 runs: River's bookkeeping on
// the harness clock leaves nothing to the wall clock or to chance.
func TestVerdictsAreDeterministic(t *testing.T) {
	longtest.Skip(t, "runs each example check 20 times")
	unique := twiceriver.InsertOpts(&river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}})
	for _, tc := range []struct {
		name string
		job  func() harness.Job
	}{
		{"reward", func() harness.Job {
			return twiceriver.Job("reward-order", points.RewardArgs{OrderID: 9812},
				func(d *harness.Delivery) river.Worker[points.RewardArgs] { return &points.RewardWorker{Pool: d.DB} }, unique)
		}},
		{"reward-2h", func() harness.Job {
			return twiceriver.Job("reward-2h", points.RewardArgs{OrderID: 9812}, rewardTimeout(2*time.Hour), unique)
		}},
		{"reward-detached", func() harness.Job {
			return twiceriver.Job("reward-detached", points.RewardArgs{OrderID: 9812}, reward(points.NoGuard, true), unique)
		}},
		{"ledger", func() harness.Job {
			return twiceriver.Job("ledger-order", points.LedgerArgs{OrderID: 9812},
				func(d *harness.Delivery) river.Worker[points.LedgerArgs] { return &points.LedgerWorker{Pool: d.DB} }, unique)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := verdicts(t, tc.job(), schema)
			require.NotEmpty(t, first)
			for i := 2; i <= 20; i++ {
				require.Equal(t, first, verdicts(t, tc.job(), schema), "run %d against run 1", i)
			}
		})
	}
}
