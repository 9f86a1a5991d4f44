package harness_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/recordtb"
)

// shardedJob takes a few steps, so its faults expand to schedules of
// several kinds, and is not idempotent, so some scenarios fail.
func shardedJob() (harness.Job, harness.Config) {
	job := harness.Job{Name: "hit-and-log", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if _, err := d.DB.Exec(ctx, `UPDATE counters SET n = n + 1`); err != nil {
			return err
		}
		_, err := d.DB.Exec(ctx, `INSERT INTO events (job_id) VALUES ($1) ON CONFLICT DO NOTHING`, d.JobID)
		return err
	}}
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.RunTwice(), faults.CrashAtEveryStep(), faults.ConcurrentDelivery()}
	return job, cfg
}

type outcome struct {
	Index    int
	Fault    faults.Name
	Schedule string
	Verdict  result.Verdict
}

func outcomes(res *harness.Result) []outcome {
	var out []outcome
	for _, s := range res.Scenarios {
		out = append(out, outcome{s.Index, s.Fault, s.Schedule.String(), s.Verdict})
	}
	return out
}

// The shards of a check run every schedule of the unsharded check
// exactly once, each at its unsharded place, with the same verdict.
func TestShardsRunEveryScheduleOnce(t *testing.T) {
	job, cfg := shardedJob()
	whole, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = whole.DropDatabases(context.Background()) })
	require.Nil(t, whole.Shard, "an unsharded run says no shard")
	want := outcomes(whole)
	require.Greater(t, len(want), 4, "too few schedules to split three ways")
	for i, o := range want {
		require.Equal(t, i, o.Index, "an unsharded scenario's Index is its place")
	}

	for _, n := range []int{2, 3} {
		got := make([]outcome, len(want))
		seen := make([]int, len(want))
		for i := 1; i <= n; i++ {
			t.Setenv(harness.ShardEnv, result.Shard{Index: i, Count: n}.String())
			res, err := harness.Run(t.Context(), job, cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
			require.NotNil(t, res.Shard)
			assert.Equal(t, i, res.Shard.Index)
			assert.Equal(t, n, res.Shard.Count)
			assert.Equal(t, len(want), res.Shard.Schedules)
			assert.Equal(t, []faults.Name{faults.NameRunTwice, faults.NameCrashMidJob, faults.NameConcurrentDelivery}, res.Shard.Faults)
			for _, o := range outcomes(res) {
				require.Less(t, o.Index, len(want), "shard %d/%d ran a schedule past the check's", i, n)
				seen[o.Index]++
				got[o.Index] = o
			}
		}
		for x, c := range seen {
			assert.Equal(t, 1, c, "%d shards: schedule %d (%s) ran %d times", n, x, want[x].Schedule, c)
		}
		assert.Equal(t, want, got, "%d shards together", n)
	}
}

// A shard dealt none of a check's schedules passes it with 0 scenarios:
// it is not the "gave no scenario" misuse of an empty fault.
func TestShardWithoutSchedulesPasses(t *testing.T) {
	job := harness.Job{Name: "hit", Handler: exec(`UPDATE counters SET n = n + 1`)}
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.RunTwice()}
	t.Setenv(harness.ShardEnv, "2/3")
	res := harness.Check(t, job, cfg)
	require.NotNil(t, res)
	assert.Empty(t, res.Scenarios)
	assert.Equal(t, result.OutcomeIdempotent, res.Outcome)
	assert.Equal(t, &result.ShardRun{Shard: result.Shard{Index: 2, Count: 3}, Schedules: 1, Faults: []faults.Name{faults.NameRunTwice}}, res.Shard)
	assert.Equal(t, `[twice] ok: job "hit": 0 scenarios in shard 2/3 (of 1), none differs from one clean run`, res.String())
}

// With no TWICE_SHARD, a check takes its shard from the CI system's own
// variables (CircleCI's here, counted from 0), and says where it came
// from; TWICE_SHARD, set, wins: 1/1 runs every schedule.
func TestShardFromCIVariables(t *testing.T) {
	job, cfg := shardedJob()
	t.Setenv(harness.ShardEnv, "")
	t.Setenv("CIRCLE_NODE_INDEX", "1")
	t.Setenv("CIRCLE_NODE_TOTAL", "2")
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	require.NotNil(t, res.Shard)
	assert.Equal(t, result.Shard{Index: 2, Count: 2}, res.Shard.Shard)
	assert.Equal(t, "CIRCLE_NODE_INDEX/CIRCLE_NODE_TOTAL", res.Shard.From)
	assert.Contains(t, res.String(), fmt.Sprintf("in shard 2/2 (of %d; from CIRCLE_NODE_INDEX/CIRCLE_NODE_TOTAL)", res.Shard.Schedules))

	t.Setenv(harness.ShardEnv, "1/1")
	res, err = harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	require.NotNil(t, res.Shard)
	assert.Equal(t, result.Shard{Index: 1, Count: 1}, res.Shard.Shard)
	assert.Empty(t, res.Shard.From)
	assert.Len(t, res.Scenarios, res.Shard.Schedules, "1/1 runs every schedule")

	t.Setenv(harness.ShardEnv, "")
	t.Setenv("CIRCLE_NODE_INDEX", "2")
	_, err = harness.Run(t.Context(), job, cfg)
	require.Error(t, err)
	assert.Contains(t, blame.Message(err), `[twice] CIRCLE_NODE_INDEX/CIRCLE_NODE_TOTAL: "3/2" names shard 3 of 2`)
}

func TestShardSettingRefused(t *testing.T) {
	job, cfg := shardedJob()
	for _, text := range []string{"0/3", "4/3", "x/y", "2/0"} {
		t.Run(text, func(t *testing.T) {
			t.Setenv(harness.ShardEnv, text)
			_, err := harness.Run(t.Context(), job, cfg)
			require.Error(t, err)
			assert.Contains(t, blame.Message(err), "[twice] -twice.shard or TWICE_SHARD: \""+text+"\"")
			assert.Contains(t, err.Error(), "want ")
		})
	}
}

// An exploration's shards draw their shares of the budget, which add up
// to it.
func TestShardExploresItsShare(t *testing.T) {
	job := harness.Job{Name: "set", Handler: exec(`UPDATE counters SET n = 1`)}
	t.Setenv(harness.ChecksEnv, "")
	total := 0
	for i, want := range []int{3, 2, 2} {
		t.Setenv(harness.ShardEnv, result.Shard{Index: i + 1, Count: 3}.String())
		x, err := harness.ExploreRun(t.Context(), job, counterConfig(), harness.ExploreOptions{Checks: 7})
		require.NoError(t, err)
		assert.False(t, x.Failed())
		assert.Equal(t, want, x.Checks, "shard %d/3 of 7 draws", i+1)
		assert.Equal(t, &result.ShardRun{Shard: result.Shard{Index: i + 1, Count: 3}}, x.Result.Shard)
		total += x.Checks
	}
	assert.Equal(t, 7, total)
}

// A shard that happens to run none of the failing scenarios of a check
// marked ExpectFinding cannot tell that the finding is gone: it logs, and
// the merged report has the verdict. Unsharded, the same check fails.
func TestShardWithoutFindingKeepsExpectFinding(t *testing.T) {
	job := harness.Job{Name: "hit", Handler: exec(`UPDATE counters SET n = n + 1`)}
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.RunTwice()}
	cfg.ExpectFinding = "adds a hit per delivery"

	t.Setenv(harness.ShardEnv, "2/2")
	rec := recordtb.New(t)
	rec.Run(func(tb testing.TB) { harness.Check(tb, job, cfg) })
	assert.Empty(t, rec.Errors())
	assert.Contains(t, strings.Join(rec.Logs(), "\n"), `[twice] job "hit" is marked not idempotent (adds a hit per delivery), and none of the 0 scenarios of shard 2/2 differs`)

	t.Setenv(harness.ShardEnv, "1/2")
	rec = recordtb.New(t)
	rec.Run(func(tb testing.TB) { harness.Check(tb, job, cfg) })
	assert.Empty(t, rec.Errors(), "shard 1/2 holds the expected finding")
}

// BenchmarkShards checks the ledger job with the default faults whole,
// then as each of three shards in turn, in the same loop so the ratios
// compare like with like on a noisy machine: slowest-shard/whole is what
// a three-machine matrix cuts the check's wall time to (every shard still
// makes the two clean reference runs), and spread is the slowest shard
// over the fastest.
func BenchmarkShards(b *testing.B) {
	job := harness.Job{Name: "ledger", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return rewardWithLedger(ctx, d.DB)
	}}
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(ledgerSchema)}}
	run := func(shard string) (time.Duration, int) {
		b.Setenv(harness.ShardEnv, shard)
		start := time.Now()
		res, err := harness.Run(b.Context(), job, cfg)
		if err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		if !res.Idempotent() {
			b.Fatalf("shard %q: the ledger job is not idempotent:\n%s", shard, res)
		}
		return took, len(res.Scenarios)
	}
	run("") // the template and the server, outside the timing
	var whole, slowest, fastest time.Duration
	var scenarios, most int
	for b.Loop() {
		w, n := run("")
		whole += w
		scenarios = n
		lo, hi := time.Duration(1<<62), time.Duration(0)
		for i := 1; i <= 3; i++ {
			d, m := run(result.Shard{Index: i, Count: 3}.String())
			lo, hi, most = min(lo, d), max(hi, d), max(most, m)
		}
		slowest += hi
		fastest += lo
	}
	b.ReportMetric(float64(whole.Milliseconds())/float64(b.N), "whole-ms/op")
	b.ReportMetric(float64(slowest.Milliseconds())/float64(b.N), "slowest-shard-ms/op")
	b.ReportMetric(float64(slowest)/float64(whole), "slowest-shard/whole")
	b.ReportMetric(float64(slowest)/float64(fastest), "spread")
	b.ReportMetric(float64(scenarios), "scenarios")
	b.ReportMetric(float64(most), "scenarios-largest-shard")
}
