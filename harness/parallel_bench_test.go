package harness_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/runtwice/twice/harness"
)

// BenchmarkParallel checks the ledger job's default matrix with one
// scenario at a time and with two, alternating in the same loop so both
// see the same machine, and reports scenarios per second for each and
// their ratio (2 workers over 1; 2.0 would be perfect scaling). The
// handler waits on the server, so on 2 cores two workers can overlap
// one scenario's server time with the other's harness time.
func BenchmarkParallel(b *testing.B) {
	ctx := context.Background()
	job := harness.Job{Name: "ledger", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return rewardWithLedger(ctx, d.DB)
	}}
	var elapsed [2]time.Duration
	var scenarios [2]int
	for b.Loop() {
		for i, p := range []int{1, 2} {
			b.Setenv(harness.ParallelEnv, strconv.Itoa(p))
			cfg := harness.Config{Setup: []harness.Setup{harness.SQL(ledgerSchema)}}
			start := time.Now()
			res, err := harness.Run(ctx, job, cfg)
			if err != nil {
				b.Fatal(err)
			}
			if !res.Idempotent() {
				b.Fatalf("the ledger job was found not idempotent with -twice.parallel=%d: %v", p, res)
			}
			elapsed[i] += time.Since(start)
			scenarios[i] += len(res.Scenarios) + 2 // and the two references
		}
	}
	one := float64(scenarios[0]) / elapsed[0].Seconds()
	two := float64(scenarios[1]) / elapsed[1].Seconds()
	b.ReportMetric(one, "scenarios/s@1")
	b.ReportMetric(two, "scenarios/s@2")
	b.ReportMetric(two/one, "speedup@2")
	b.ReportMetric(0, "ns/op") // the metrics above split the loop's time
}
