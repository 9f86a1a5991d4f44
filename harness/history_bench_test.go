package harness_test

import (
	"context"
	"testing"
	"time"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/internal/freshdb"
)

// BenchmarkHistoryCost is what the write history costs: the seed's
// correct ledger job with the default faults and the 64-statement
// transaction job, each checked on a template with the history and on
// one without it (freshdb.WithoutHistory: the change log stays, no row
// is noted), alternately in one loop, so that the ratios come from one
// run on a shared machine. Issue 38 bounds them at 1.15x (ledger, per
// scenario) and 1.3x (64 statements, per check).
//
//	go test -run '^$' -bench BenchmarkHistoryCost -count 5 ./harness
func BenchmarkHistoryCost(b *testing.B) {
	ctx := context.Background()
	ledger := harness.Job{Name: "ledger", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return rewardWithLedger(ctx, d.DB)
	}}
	rowsSchema := `CREATE TABLE rows (id int PRIMARY KEY)`
	type pair struct {
		name      string
		job       harness.Job
		with, not harness.Config
	}
	pairs := []pair{
		{"ledger", ledger,
			harness.Config{Setup: []harness.Setup{harness.SQL(ledgerSchema)}},
			harness.Config{Setup: []harness.Setup{harness.SQL(ledgerSchema + "\n-- without the history")}}},
		{"n64", transactionJob(64),
			harness.Config{Setup: []harness.Setup{harness.SQL(rowsSchema)}},
			harness.Config{Setup: []harness.Setup{harness.SQL(rowsSchema + "\n-- without the history")}}},
	}
	// The templates are built before the loop: those without the history
	// while WithoutHistory holds, which no later Run changes (a template
	// is built once per content).
	restore := freshdb.WithoutHistory()
	for _, p := range pairs {
		if _, err := harness.Run(ctx, p.job, p.not); err != nil {
			restore()
			b.Fatal(err)
		}
	}
	restore()
	for _, p := range pairs {
		if _, err := harness.Run(ctx, p.job, p.with); err != nil {
			b.Fatal(err)
		}
	}
	var with, without [2]time.Duration
	var scenWith, scenWithout [2]int
	check := func(p pair, cfg harness.Config) (time.Duration, int) {
		start := time.Now()
		res, err := harness.Run(ctx, p.job, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if !res.Idempotent() {
			b.Fatalf("the %s job was found not idempotent: %s", p.name, res)
		}
		return time.Since(start), len(res.Scenarios) + 2
	}
	for b.Loop() {
		for i, p := range pairs {
			d, n := check(p, p.with)
			with[i], scenWith[i] = with[i]+d, scenWith[i]+n
			d, n = check(p, p.not)
			without[i], scenWithout[i] = without[i]+d, scenWithout[i]+n
		}
	}
	perScenario := func(d time.Duration, n int) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }
	b.ReportMetric(perScenario(with[0], scenWith[0]), "ms/scenario-ledger")
	b.ReportMetric(perScenario(without[0], scenWithout[0]), "ms/scenario-ledger-nohistory")
	b.ReportMetric(perScenario(with[0], scenWith[0])/perScenario(without[0], scenWithout[0]), "ledger-history/none")
	b.ReportMetric(float64(with[1].Microseconds())/1000/float64(b.N), "ms/check-n64")
	b.ReportMetric(float64(without[1].Microseconds())/1000/float64(b.N), "ms/check-n64-nohistory")
	b.ReportMetric(float64(with[1])/float64(without[1]), "n64-history/none")
	b.ReportMetric(0, "ns/op")
}
