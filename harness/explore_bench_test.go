package harness_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/runtwice/twice/harness"
)

// BenchmarkExploreVsMatrix prices an exploration schedule in default-matrix
// scenarios of the same job (the seed's correct ledger job), in one run:
// every iteration checks the job with Run and explores it with ExploreRun
// (default budget, 4 rapid streams), and explores it again with one
// stream as Explore used to (-1stream), rotating which goes first. Both
// counts include the two clean references each starts with, so
// ms/scenario and ms/schedule are each one call's wall time over the
// scenarios, or the distinct schedules, it ran; schedule/scenario is
// their ratio. deliveries/scenario and deliveries/schedule say how many
// handler invocations each held on average (the schedule's, not the
// queue's retries), and schedule/scenario-per-delivery is the ratio
// with each side's time per delivery instead: a drawn schedule holds
// more deliveries than a matrix scenario. later-refs/exploration counts
// the clean runs at a later clock an exploration made (not counted as
// schedules), and pool-use how full the scenario pool was while rapid
// drew. schedule/scenario-same-deliveries prices the extra deliveries
// in by a line fitted to the schedules' own run times (fit-ms-fixed +
// fit-ms/delivery per delivery): it is the ratio left if a matrix
// scenario held as many deliveries as a schedule.
func BenchmarkExploreVsMatrix(b *testing.B) {
	ctx := context.Background()
	var runTime, exploreTime, oldTime time.Duration
	scenarios, schedules, oldSchedules, runDeliveries := 0, 0, 0, 0
	exploreDeliveries, references, explorations := 0, 0, 0
	var poolUse float64
	var fit deliveryFit
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
		explore := func(streams int, took *time.Duration, count *int) {
			defer harness.SetExploreStreams(streams)()
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
			if streams == 4 {
				d, refs := harness.ExploreCounts(x)
				exploreDeliveries += d + 2
				references += refs
				poolUse += harness.ExplorePoolUse(x, runtime.GOMAXPROCS(0))
				explorations++
				harness.ExploreTimes(x, func(deliveries int, took time.Duration) { fit.add(float64(deliveries), took.Seconds()) })
			}
		}
		runs := []func(){
			check,
			func() { explore(4, &exploreTime, &schedules) },
			func() { explore(1, &oldTime, &oldSchedules) },
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
	b.ReportMetric(perOld/perScenario, "schedule/scenario-1stream")
	b.ReportMetric(float64(runDeliveries)/float64(scenarios), "deliveries/scenario")
	perDelivery := perScenario * float64(scenarios) / float64(runDeliveries)
	perScheduleDelivery := perSchedule * float64(schedules) / float64(exploreDeliveries)
	b.ReportMetric(perScheduleDelivery/perDelivery, "schedule/scenario-per-delivery")
	// The schedules' extra deliveries priced in: a line fitted to the
	// schedules' run times over their deliveries (1 to 5; the matrix's
	// hold 2 nearly all) says what one of the matrix's mean deliveries
	// would take, and the ratio is divided by what the schedule's mean
	// takes over that.
	if sched, scen := fit.at(float64(exploreDeliveries)/float64(schedules)), fit.at(float64(runDeliveries)/float64(scenarios)); sched > 0 && scen > 0 {
		b.ReportMetric(perSchedule/perScenario/(sched/scen), "schedule/scenario-same-deliveries")
	} else {
		b.Logf("no line fits the schedules' run times over their deliveries: %.1f ms at %.2f deliveries, %.1f ms at %.2f", scen*1000, float64(runDeliveries)/float64(scenarios), sched*1000, float64(exploreDeliveries)/float64(schedules))
	}
	b.ReportMetric(fit.at(0)*1000, "fit-ms-fixed")
	b.ReportMetric((fit.at(1)-fit.at(0))*1000, "fit-ms/delivery")
	b.ReportMetric(float64(exploreDeliveries)/float64(schedules), "deliveries/schedule")
	b.ReportMetric(float64(references)/float64(explorations), "later-refs/exploration")
	b.ReportMetric(poolUse/float64(explorations), "pool-use")
	b.ReportMetric(0, "ns/op") // the loop times both; the metrics above split them
}

// deliveryFit is a least-squares line of a scenario's run time over its
// deliveries.
type deliveryFit struct{ n, x, y, xx, xy float64 }

func (f *deliveryFit) add(x, y float64) {
	f.n++
	f.x += x
	f.y += y
	f.xx += x * x
	f.xy += x * y
}

// at is the line's run time at x deliveries; 0 when the scenarios all
// held as many deliveries, so that no line fits.
func (f *deliveryFit) at(x float64) float64 {
	d := f.n*f.xx - f.x*f.x
	if d == 0 {
		return 0
	}
	slope := (f.n*f.xy - f.x*f.y) / d
	return (f.y-slope*f.x)/f.n + slope*x
}
