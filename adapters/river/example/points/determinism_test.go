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
	"github.com/runtwice/twice/harness/result"
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

// repeats is how many times each example check runs (issue 27: every
// correct job stays quiet across 30).
const repeats = 30

// The adapter's example checks, under the default matrix, give the same
// verdict for every schedule on each of 30 runs, and the correct jobs
// (the unique reward, the reward with a 2h timeout, the unique shipping
// job, the snoozing reminder) stay quiet on every one: River's
// bookkeeping on the harness clock leaves nothing to the wall clock or
// to chance.
func TestVerdictsAreDeterministic(t *testing.T) {
	harness.SkipUnlessLong(t, "runs each example check 30 times")
	unique := twiceriver.InsertOpts(&river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}})
	due := time.Date(2026, 1, 1, 9, 5, 0, 0, time.UTC) // as TestSnoozeIsNotAFinding
	for _, tc := range []struct {
		name    string
		job     func() harness.Job
		correct bool // every verdict is idempotent, on every run
	}{
		{"reward", func() harness.Job {
			return twiceriver.Job("reward-order", points.RewardArgs{OrderID: 9812},
				func(d *harness.Delivery) river.Worker[points.RewardArgs] { return &points.RewardWorker{Pool: d.DB} }, unique)
		}, true},
		{"reward-2h", func() harness.Job {
			// As TestLongTimeoutWorkerPassesEveryScenario checks it.
			return twiceriver.Job("reward-2h", points.RewardArgs{OrderID: 9812}, rewardTimeout(2*time.Hour), twiceriver.RescueAfter(time.Hour), unique)
		}, true},
		{"ship", func() harness.Job {
			return twiceriver.Job("ship-order", points.ShipArgs{OrderID: 9812},
				func(d *harness.Delivery) river.Worker[points.ShipArgs] {
					return &points.ShipWorker{Pool: d.DB, Unique: true}
				})
		}, true},
		{"reminder", func() harness.Job {
			return twiceriver.Job("reminder", points.ReminderArgs{OrderID: 9812, DueAt: due}, func(d *harness.Delivery) river.Worker[points.ReminderArgs] {
				return &points.ReminderWorker{Pool: d.DB, Now: d.Now}
			})
		}, true},
		{"reward-detached", func() harness.Job {
			return twiceriver.Job("reward-detached", points.RewardArgs{OrderID: 9812}, reward(points.NoGuard, true), unique)
		}, false},
		{"ledger", func() harness.Job {
			return twiceriver.Job("ledger-order", points.LedgerArgs{OrderID: 9812},
				func(d *harness.Delivery) river.Worker[points.LedgerArgs] { return &points.LedgerWorker{Pool: d.DB} }, unique)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var first map[string]string
			for i := 1; i <= repeats; i++ {
				got := verdicts(t, tc.job(), schema)
				require.NotEmpty(t, got)
				if first == nil {
					first = got
				} else {
					require.Equal(t, first, got, "run %d against run 1", i)
				}
				if tc.correct {
					for sched, v := range got {
						require.Equal(t, string(result.Idempotent), v, "run %d of a correct job: %s", i, sched)
					}
				}
			}
		})
	}
}
