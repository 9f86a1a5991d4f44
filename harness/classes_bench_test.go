package harness_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/harness"
)

// transactionJob is a job of n statements in one transaction: BEGIN, n
// upserts of rows 1..n, COMMIT. It is idempotent.
func transactionJob(n int) harness.Job {
	return harness.Job{Name: fmt.Sprintf("tx-%d", n), Handler: func(ctx context.Context, d *harness.Delivery) error {
		return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
			for i := 1; i <= n; i++ {
				if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO rows (id) VALUES (%d) ON CONFLICT DO NOTHING`, i)); err != nil {
					return err
				}
			}
			return nil
		})
	}}
}

// BenchmarkTransactionStatements checks a job of 1, 8 and 64 statements in
// one transaction with the default matrix, the three in each loop, so
// the ratios N=64/N=1 (scenarios per check, time per check) come from
// one run on a shared machine. reruns/check counts the passing scenarios
// run again because their run raced (Scenario.Rerun), each a whole run.
func BenchmarkTransactionStatements(b *testing.B) {
	ctx := context.Background()
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(`CREATE TABLE rows (id int PRIMARY KEY)`)}}
	sizes := []int{1, 8, 64}
	elapsed := make([]time.Duration, len(sizes))
	scenarios := make([]int, len(sizes))
	reruns := make([]int, len(sizes)) // passing scenarios run again because their run raced
	for b.Loop() {
		for i, n := range sizes {
			start := time.Now()
			res, err := harness.Run(ctx, transactionJob(n), cfg)
			if err != nil {
				b.Fatal(err)
			}
			elapsed[i] += time.Since(start)
			if !res.Idempotent() {
				b.Fatalf("the %d-statement job was found not idempotent: %s", n, res)
			}
			scenarios[i] += len(res.Scenarios)
			for _, sc := range res.Scenarios {
				if sc.Rerun != nil {
					reruns[i]++
				}
			}
		}
	}
	runs := float64(b.N)
	for i, n := range sizes {
		b.ReportMetric(float64(scenarios[i])/runs, fmt.Sprintf("scenarios/check-N%d", n))
		b.ReportMetric(float64(elapsed[i].Microseconds())/1000/runs, fmt.Sprintf("ms/check-N%d", n))
		b.ReportMetric(float64(reruns[i])/runs, fmt.Sprintf("reruns/check-N%d", n))
	}
	last := len(sizes) - 1
	b.ReportMetric(float64(scenarios[last])/float64(scenarios[0]), "scenarios-N64/N1")
	b.ReportMetric(float64(elapsed[last])/float64(elapsed[0]), "time-N64/N1")
	b.ReportMetric(0, "ns/op") // the loop times all three; the metrics above split them
}
