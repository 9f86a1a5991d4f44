package orders_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	twicewatermill "github.com/runtwice/twice/adapters/watermill"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

// A whole check (the default fault matrix) of a handler behind Watermill's
// Retry at production intervals (100ms to 1s, 10 retries), whose first two
// calls of every delivery fail: run at its configured intervals it would
// sleep 300ms+ per delivery, and minutes in all when a fault makes every
// retry fail. s/check is the wall time of one harness.Run.
func BenchmarkRetryAtProductionIntervals(b *testing.B) {
	retry := middleware.Retry{MaxRetries: 10, InitialInterval: 100 * time.Millisecond, MaxInterval: time.Second, Multiplier: 2}
	job := twicewatermill.Job("award-points", placed, nil, flaky, twicewatermill.Retry(retry))
	cfg := config(harness.Config{Faults: faults.DefaultWithout(faults.NameProducerRetry, faults.NameConcurrentProducerRetry)})
	var scenarios int
	start := time.Now()
	for b.Loop() {
		res, err := harness.Run(context.Background(), job, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if failed := res.Failed(); len(failed) > 0 {
			b.Fatalf("%s", res)
		}
		scenarios = len(res.Scenarios)
		_ = res.DropDatabases(context.Background())
	}
	b.ReportMetric(time.Since(start).Seconds()/float64(b.N), "s/check")
	b.ReportMetric(float64(scenarios), "scenarios/check")
}
