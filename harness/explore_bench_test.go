package harness_test

import (
	"context"
	"testing"
	"time"

	"github.com/runtwice/twice/harness"
)

// BenchmarkExploreVsMatrix prices an exploration schedule in default-matrix
// scenarios of the same job (the seed's correct ledger job), in one run:
// every iteration checks the job with Run and explores it with ExploreRun
// (default budget), and explores it again drawing at most 4 schedules per
// rapid check as Explore used to (-batch4), rotating which goes first. Both counts include the
// two clean references each starts with, so ms/scenario and ms/schedule
// are each one call's wall time over the scenarios, or the distinct
// schedules, it ran; schedule/scenario is their ratio, and deliveries/...
// says how many handler invocations a scenario held on average (a drawn
// schedule holds about 2.6).
func BenchmarkExploreVsMatrix(b *testing.B) {
	ctx := context.Background()
	var runTime, exploreTime, oldTime time.Duration
	scenarios, schedules, oldSchedules, runDeliveries := 0, 0, 0, 0
	for i := 0; b.Loop(); i++ {
		check := func() {
			start := time.Now()
			res, err := harness.Run(ctx, ledgerJob, ledgerConfig)
			if err != nil {
				b.Fatal(err)
			}
			runTime += time.Since(start)
			if !res.Idempotent() {
				b.Fatalf("the ledger job was found not idempotent: %+v", res.Failed())
			}
			scenarios += len(res.Scenarios) + 2
			runDeliveries += 2 // the references
			for _, sc := range res.Scenarios {
				runDeliveries += len(sc.Schedule.Deliveries)
			}
		}
		explore := func(batch int, took *time.Duration, count *int) {
			defer harness.SetExploreBatch(batch)()
			start := time.Now()
			x, err := harness.ExploreRun(ctx, ledgerJob, ledgerConfig, harness.ExploreOptions{})
			if err != nil {
				b.Fatal(err)
			}
			*took += time.Since(start)
			if x.Failed() {
				b.Fatalf("the ledger job was found not idempotent: %s", x.Minimal)
			}
			*count += x.Executed + 2
		}
		runs := []func(){
			check,
			func() { explore(16, &exploreTime, &schedules) },
			func() { explore(4, &oldTime, &oldSchedules) },
		}
		for k := range runs {
			runs[(k+i)%len(runs)]() // rotate who goes first
		}
	}
	perScenario := float64(runTime.Microseconds()) / 1000 / float64(scenarios)
	perSchedule := float64(exploreTime.Microseconds()) / 1000 / float64(schedules)
	b.ReportMetric(perScenario, "ms/scenario")
	b.ReportMetric(perSchedule, "ms/schedule")
	b.ReportMetric(perSchedule/perScenario, "schedule/scenario")
	perOld := float64(oldTime.Microseconds()) / 1000 / float64(oldSchedules)
	b.ReportMetric(perOld/perScenario, "schedule/scenario-batch4")
	b.ReportMetric(float64(runDeliveries)/float64(scenarios), "deliveries/scenario")
	b.ReportMetric(0, "ns/op") // the loop times both; the metrics above split them
}
