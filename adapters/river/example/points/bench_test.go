package points_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	twiceriver "github.com/runtwice/twice/adapters/river"
	"github.com/runtwice/twice/adapters/river/example/points"
	"github.com/runtwice/twice/harness"
)

// BenchmarkDefaultMatrix is the cost of River's bookkeeping in a check:
// the reward worker's default matrix through the River adapter, against
// the same transaction as a plain handler on the same schema without
// River. Compare the two ns/op of one run:
//
//	cd adapters/river && go test -run '^$' -bench DefaultMatrix -benchtime 2x -count 5 ./example/points/
func BenchmarkDefaultMatrix(b *testing.B) {
	b.Run("river", func(b *testing.B) {
		bench(b, twiceriver.Job("reward", points.RewardArgs{OrderID: 9812}, reward(points.NoGuard, false)), cfg)
	})
	b.Run("plain", func(b *testing.B) {
		plain := harness.Job{Name: "reward-plain", Handler: func(ctx context.Context, d *harness.Delivery) error {
			return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `
					UPDATE accounts SET points = accounts.points + o.points
					FROM orders o WHERE o.id = $1 AND accounts.id = o.account_id`, int64(9812))
				return err
			})
		}}
		bench(b, plain, harness.Config{Setup: []harness.Setup{harness.SQL(points.Schema)}})
	})
}

func bench(b *testing.B, job harness.Job, c harness.Config) {
	var scenarios int
	for b.Loop() {
		res, err := harness.Run(context.Background(), job, c)
		if err != nil {
			b.Fatal(err)
		}
		scenarios = len(res.Scenarios)
		_ = res.DropDatabases(context.Background())
	}
	b.ReportMetric(float64(scenarios), "scenarios/check")
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N*max(scenarios, 1)), "ms/scenario")
}

var _ river.Worker[points.RewardArgs] = (*points.RewardWorker)(nil)
