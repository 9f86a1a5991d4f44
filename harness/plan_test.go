package harness_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/record"
	"github.com/runtwice/twice/internal/recordtb"
)

// writePlan writes p where the tests read the runner's plan.
func writePlan(t *testing.T, p *record.Plan) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "plan.json")
	require.NoError(t, record.WritePlan(path, p))
	t.Setenv(record.PlanEnv, path)
}

// checkAsShard runs the check as shard i/n under a recording TB (the job
// is not idempotent: its findings are recorded, not failures).
func checkAsShard(t *testing.T, job harness.Job, cfg harness.Config, shard string) *harness.Result {
	t.Helper()
	t.Setenv(harness.ShardEnv, shard)
	var res *harness.Result
	recordtb.New(t).Run(func(tb testing.TB) { res = harness.Check(tb, job, cfg) })
	require.NotNil(t, res, "shard %s", shard)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	return res
}

// With the runner's costs (twice report -timings), a check deals its
// schedules to shards costliest first, each to the least loaded shard on
// top of the loads earlier checks left: the shards still run every
// schedule once, at its unsharded place, with the same verdict, but not
// in turn.
func TestShardsDealtByCost(t *testing.T) {
	job, cfg := shardedJob()
	whole, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = whole.DropDatabases(context.Background()) })
	want := outcomes(whole)

	wd, err := os.Getwd()
	require.NoError(t, err)
	check := record.PlanCheck{Dir: wd, Test: t.Name(), Job: job.Name,
		Costs: map[faults.Name]float64{faults.NameRunTwice: 1, faults.NameCrashMidJob: 2, faults.NameConcurrentDelivery: 40},
		Loads: []float64{0, 0, 30}}
	writePlan(t, &record.Plan{Shards: 3, From: "a report", Checks: []record.PlanCheck{check}})
	var faultOf []faults.Name
	for _, o := range want {
		faultOf = append(faultOf, o.Fault)
	}
	owner, _ := record.Deal(check.ScheduleCosts(faultOf), check.Loads)
	inTurn := true
	for i, o := range owner {
		inTurn = inTurn && o == i%3
	}
	require.False(t, inTurn, "the costs deal as turns would: %v", owner)

	got := make([]outcome, len(want))
	seen := make([]int, len(want))
	for i := 1; i <= 3; i++ {
		res := checkAsShard(t, job, cfg, result.Shard{Index: i, Count: 3}.String())
		var dealt []int
		for x, o := range owner {
			if o == i-1 {
				dealt = append(dealt, x)
			}
		}
		assert.Equal(t, dealt, res.Shard.Dealt, "shard %d/3 takes what the costs deal it", i)
		for _, o := range outcomes(res) {
			require.Less(t, o.Index, len(want))
			seen[o.Index]++
			got[o.Index] = o
		}
	}
	for x, c := range seen {
		assert.Equal(t, 1, c, "schedule %d (%s) ran %d times", x, want[x].Schedule, c)
	}
	assert.Equal(t, want, got, "the shards together")

	// Costs dealt for another count of shards are refused, not dealt
	// anyhow.
	t.Setenv(harness.ShardEnv, "1/2")
	var errs []string
	rec := recordtb.New(t)
	rec.Run(func(tb testing.TB) { harness.Check(tb, job, cfg) })
	errs = rec.Errors()
	require.Len(t, errs, 1)
	assert.Contains(t, errs[0], "dealt the checks' costs (a report) to 3 shards, but this is shard 1/2")
}

// Under twice report -rerun-failed a check runs exactly the schedules the
// plan names, each under its fault, and a check the plan does not name
// runs none: its clean references only.
func TestRerunRunsOnlyThePlansSchedules(t *testing.T) {
	job, cfg := shardedJob()
	whole, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = whole.DropDatabases(context.Background()) })
	var failed []record.PlanSchedule
	for _, s := range whole.Scenarios {
		if s.Verdict != result.Idempotent && len(failed) < 2 {
			failed = append(failed, record.PlanSchedule{Fault: s.Fault, Schedule: s.Schedule.String()})
		}
	}
	require.Len(t, failed, 2, "the job should fail at least twice")
	wd, err := os.Getwd()
	require.NoError(t, err)
	writePlan(t, &record.Plan{Rerun: true, From: "a report", Checks: []record.PlanCheck{{Dir: wd, Test: t.Name(), Job: job.Name, Rerun: failed}}})
	t.Setenv(harness.ShardEnv, "")

	var res *harness.Result
	recordtb.New(t).Run(func(tb testing.TB) { res = harness.Check(tb, job, cfg) })
	require.NotNil(t, res)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	var ran []record.PlanSchedule
	for _, s := range res.Scenarios {
		ran = append(ran, record.PlanSchedule{Fault: s.Fault, Schedule: s.Schedule.String()})
		assert.NotEqual(t, result.Idempotent, s.Verdict, "%s failed before, and the job has not changed", s.Schedule)
	}
	assert.Equal(t, failed, ran)

	other := harness.Job{Name: "hit", Handler: exec(`UPDATE counters SET n = n + 1`)}
	cfg.Faults = []faults.Fault{faults.RunTwice()}
	res = harness.Check(t, other, cfg)
	require.NotNil(t, res)
	assert.Empty(t, res.Scenarios, "the plan names no schedule of job %q", other.Name)
	assert.Equal(t, result.OutcomeIdempotent, res.Outcome)
}

// Under -rerun-failed an exploration draws nothing: it runs the plan's
// schedules of it, and finds again what failed.
func TestRerunExploresOnlyThePlansSchedules(t *testing.T) {
	job, cfg := shardedJob()
	sched, err := faults.Parse("j1a1w1 > j1a2w2")
	require.NoError(t, err)
	wd, err := os.Getwd()
	require.NoError(t, err)
	writePlan(t, &record.Plan{Rerun: true, From: "a report", Checks: []record.PlanCheck{{Dir: wd, Test: t.Name(), Job: job.Name,
		Rerun: []record.PlanSchedule{{Fault: faults.NameExplore, Schedule: sched.String()}}}}})
	t.Setenv(harness.ShardEnv, "")
	cfg.Faults = nil
	var x *harness.Exploration
	recordtb.New(t).Run(func(tb testing.TB) {
		x = harness.Explore(tb, job, cfg, harness.ExploreOptions{Checks: 50, Dir: t.TempDir()})
	})
	require.NotNil(t, x)
	t.Cleanup(func() { _ = x.Result.DropDatabases(context.Background()) })
	assert.Zero(t, x.Checks, "nothing drawn")
	assert.True(t, x.Failed(), "run twice adds the hit again")
	require.NotNil(t, x.Found)
	assert.Equal(t, sched.String(), x.Found.String())
}
