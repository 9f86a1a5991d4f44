package harness_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
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

var (
	ledgerJob = harness.Job{Name: "ledger", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return rewardWithLedger(ctx, d.DB)
	}}
	ledgerConfig = harness.Config{Setup: []harness.Setup{harness.SQL(ledgerSchema)}}
	hitJob       = harness.Job{Name: "hit", Handler: exec(`UPDATE counters SET n = n + 1`)}
)

func TestExploreIdempotentJob(t *testing.T) {
	x, err := harness.ExploreRun(t.Context(), ledgerJob, ledgerConfig, harness.ExploreOptions{Checks: 30})
	require.NoError(t, err)
	assert.False(t, x.Failed(), "minimal %v", x.Minimal)
	assert.Equal(t, 30, x.Checks)
	assert.Positive(t, x.Executed)
	assert.LessOrEqual(t, x.Executed, 30, "a schedule drawn twice runs once")
	assert.Empty(t, x.Result.Scenarios)
	assert.True(t, x.Result.Idempotent())
}

// A counter that adds on every delivery fails every schedule that makes
// the job's work happen twice; exploration shrinks to one of the smallest.
func TestExploreShrinks(t *testing.T) {
	dir := t.TempDir()
	x, err := harness.ExploreRun(t.Context(), hitJob, counterConfig(), harness.ExploreOptions{Dir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { x.Result.DropDatabases(context.Background()) })
	require.True(t, x.Failed())
	assert.False(t, x.Flaky)
	// Each is one step from passing: no fault, or a fault that leaves the
	// increment undone.
	assert.Contains(t, []string{"j1a1w1!crash", "j1a1w1!ambiguous:1", "j1a1w1 > j1a2w2"}, x.Minimal.String(), "found %s", x.Found)
	assert.NotZero(t, x.Seed, "the seed, from the fail file rapid wrote")
	left, _ := filepath.Glob(filepath.Join("testdata", "rapid", "*", "*.fail"))
	assert.Empty(t, left, "rapid's fail file is removed; the schedule is saved instead")
	require.Len(t, x.Result.Scenarios, 1)
	sc := x.Result.Scenarios[0]
	assert.Equal(t, result.NotIdempotent, sc.Verdict)
	assert.Equal(t, x.Minimal.String(), sc.Schedule.String())
	assert.NotEmpty(t, sc.Database, "the finding's database is kept as evidence")

	// Saved, and replayed first the next time, without drawing.
	require.NotEmpty(t, x.SavedTo)
	assert.Equal(t, dir, filepath.Dir(x.SavedTo))
	data, err := os.ReadFile(x.SavedTo)
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(string(data), "\n"+x.Minimal.String()+"\n"), "saved file:\n%s", data)

	again, err := harness.ExploreRun(t.Context(), hitJob, counterConfig(), harness.ExploreOptions{Dir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { again.Result.DropDatabases(context.Background()) })
	assert.Equal(t, []string{x.SavedTo}, again.Replayed)
	assert.Equal(t, x.Minimal.String(), again.Minimal.String())
	assert.Zero(t, again.Checks, "nothing is drawn when a saved schedule fails")
	assert.Zero(t, again.Seed)
	assert.Empty(t, again.SavedTo, "a saved schedule is not saved twice")
}

func TestExploreMessage(t *testing.T) {
	rec := recordtb.New(t)
	var x *harness.Exploration
	rec.Run(func(tb testing.TB) {
		x = harness.Explore(tb, hitJob, counterConfig(), harness.ExploreOptions{Dir: t.TempDir()})
	})
	errs := rec.Errors()
	require.Len(t, errs, 1)
	msg := errs[0]
	for _, want := range []string{
		`[twice] not idempotent: job "hit": exploration drew `,
		"explore (schedule " + x.Minimal.String() + "):",
		`table "counters" after explore mismatch (-once +twice):`,
		"seed: ",
		"saved: " + x.SavedTo + " (the next go test replays it first)",
		"rerun: go test -run '^TestExploreMessage$' ./harness -twice.replay='" + x.Minimal.String() + "'",
	} {
		assert.Contains(t, msg, want)
	}
	assert.Equal(t, "go test -run '^TestExploreMessage$' ./harness -twice.replay='"+x.Minimal.String()+"'", x.ReplayLine)
}

// coinJob is idempotent on a first delivery and, on a redelivery, adds a
// hit when a coin says so.
func coinJob() harness.Job {
	return harness.Job{Name: "coin", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if d.Attempt > 1 && rand.IntN(2) == 0 {
			_, err := d.DB.Exec(ctx, `UPDATE counters SET n = n + 1`)
			return err
		}
		return nil
	}}
}

func TestExploreFlaky(t *testing.T) {
	rec := recordtb.New(t)
	var x *harness.Exploration
	rec.Run(func(tb testing.TB) {
		// Ten reruns: the coin comes up the same eleven times in a row
		// once in a thousand tries.
		x = harness.Explore(tb, coinJob(), counterConfig(), harness.ExploreOptions{Dir: t.TempDir(), Reruns: 10})
	})
	require.NotNil(t, x)
	assert.True(t, x.Flaky)
	assert.Empty(t, x.SavedTo, "a flaky schedule is not saved")
	errs := rec.Errors()
	require.Len(t, errs, 1)
	msg := errs[0]
	assert.Contains(t, msg, `[twice] flaky: job "coin": schedule `+x.Minimal.String()+" failed ")
	assert.Contains(t, msg, "of 11 runs, so it is not reported as a pass")
	assert.Contains(t, msg, "run 1: not-idempotent: table \"counters\" differs from one clean run")
	assert.Contains(t, msg, ": idempotent\n")
	assert.Contains(t, msg, "the first failing run:\n")
	assert.Contains(t, msg, "rerun: go test -run '^TestExploreFlaky$' ./harness -twice.replay='"+x.Minimal.String()+"'")
}

// With TWICE_REPLAY set, Explore and Check run exactly that schedule.
func TestReplay(t *testing.T) {
	t.Setenv(harness.ReplayEnv, "j1a1w1!lostack > +30s j1a2w1")

	x, err := harness.ExploreRun(t.Context(), hitJob, counterConfig(), harness.ExploreOptions{Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { x.Result.DropDatabases(context.Background()) })
	require.NotNil(t, x.Replay)
	assert.Equal(t, "j1a1w1!lostack > +30s j1a2w1", x.Replay.String())
	assert.Equal(t, x.Replay.String(), x.Minimal.String())
	assert.Equal(t, 1, x.Executed)
	assert.Zero(t, x.Checks)
	assert.Empty(t, x.SavedTo, "a replayed schedule is not saved")

	rec := recordtb.New(t)
	var res *harness.Result
	rec.Run(func(tb testing.TB) { res = harness.Check(tb, hitJob, counterConfig()) })
	require.Len(t, res.Scenarios, 1)
	assert.Equal(t, "j1a1w1!lostack > +30s j1a2w1", res.Scenarios[0].Schedule.String())
	assert.Equal(t, faults.NameReplay, res.Scenarios[0].Fault)
	assert.Len(t, rec.Errors(), 1)
}

func TestReplayRefusesBadSchedule(t *testing.T) {
	t.Setenv(harness.ReplayEnv, "j1a1w1 > j1a0w2")
	for name, run := range map[string]func(tb testing.TB){
		"Check":   func(tb testing.TB) { harness.Check(tb, hitJob, counterConfig()) },
		"Explore": func(tb testing.TB) { harness.Explore(tb, hitJob, counterConfig(), harness.ExploreOptions{}) },
	} {
		t.Run(name, func(t *testing.T) {
			rec := recordtb.New(t)
			rec.Run(run)
			errs := rec.Errors()
			require.Len(t, errs, 1)
			assert.Contains(t, errs[0], `[twice] schedule "j1a1w1 > j1a0w2": delivery 2: `)
			assert.Contains(t, errs[0], "(from -twice.replay or TWICE_REPLAY)")
		})
	}
}

// A replayed crash or lost reply past the job's last step would never
// happen: the replay is refused, naming the job's step count.
func TestReplayRefusesStepPastTheEnd(t *testing.T) {
	for _, sched := range []string{"j1a1w1!crash:99 > +30s j1a2w2", "j1a1w1!ambiguous:2 > +30s j1a2w2"} {
		t.Setenv(harness.ReplayEnv, sched)
		for name, run := range map[string]func(tb testing.TB){
			"Check":   func(tb testing.TB) { harness.Check(tb, hitJob, counterConfig()) },
			"Explore": func(tb testing.TB) { harness.Explore(tb, hitJob, counterConfig(), harness.ExploreOptions{}) },
		} {
			t.Run(name+" "+sched, func(t *testing.T) {
				rec := recordtb.New(t)
				rec.Run(run)
				errs := rec.Errors()
				require.Len(t, errs, 1)
				assert.Contains(t, errs[0], `[twice] schedule "`+sched+`": j1a1w1!`)
				assert.Contains(t, errs[0], `but job "hit" takes 1 step on a clean run`)
				assert.NotContains(t, errs[0], "internal")
			})
		}
	}
}

func TestExploreChecksFromEnvironment(t *testing.T) {
	t.Setenv(harness.ChecksEnv, "7")
	x, err := harness.ExploreRun(t.Context(), ledgerJob, ledgerConfig, harness.ExploreOptions{Checks: 50})
	require.NoError(t, err)
	assert.Equal(t, 7, x.Checks)

	t.Setenv(harness.ChecksEnv, "many")
	_, err = harness.ExploreRun(t.Context(), ledgerJob, ledgerConfig, harness.ExploreOptions{})
	assert.Contains(t, blame.Message(err), `[twice] -twice.checks or TWICE_CHECKS is "many"; want a number of schedules`)
}

func TestExploreSavedScheduleThatNoLongerParses(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.schedule"), []byte("# a comment\nj1a1w1!explode\n"), 0o644))
	_, err := harness.ExploreRun(t.Context(), ledgerJob, ledgerConfig, harness.ExploreOptions{Dir: dir})
	assert.ErrorContains(t, err, "bad.schedule")
	assert.ErrorContains(t, err, `unknown fault "explode"`)
	assert.ErrorContains(t, err, "fix or delete the file")
}

func TestExploreExpectFindingButNone(t *testing.T) {
	cfg := ledgerConfig
	cfg.ExpectFinding = "it double counts"
	rec := recordtb.New(t)
	rec.Run(func(tb testing.TB) {
		harness.Explore(tb, ledgerJob, cfg, harness.ExploreOptions{Checks: 5, Dir: t.TempDir()})
	})
	errs := rec.Errors()
	require.Len(t, errs, 1)
	assert.Equal(t, `[twice] job "ledger" is marked not idempotent (it double counts), but all 5 schedules explored passed: remove Config.ExpectFinding, or explore further with -twice.checks`, errs[0])
}

// The generator's schedules are what the harness executes: every fault
// kind, overlaps and clock moves run on a real job without breaking the
// harness.
func TestExploreRunsEveryKindOfSchedule(t *testing.T) {
	x, err := harness.ExploreRun(t.Context(), ledgerJob, ledgerConfig, harness.ExploreOptions{Checks: 60, Limits: faults.Limits{Deliveries: 5, Jobs: 3}})
	require.NoError(t, err)
	assert.False(t, x.Failed(), "minimal %v", x.Minimal)
}

// BenchmarkExplore explores the seed's correct ledger job with the default
// budget. schedules/s counts distinct schedules run on a fresh database
// (a schedule drawn twice runs once); draws/s counts every drawn one. Both
// include the two clean references each exploration starts with.
func BenchmarkExplore(b *testing.B) {
	ctx := context.Background()
	var elapsed time.Duration
	executed, drawn := 0, 0
	for b.Loop() {
		start := time.Now()
		x, err := harness.ExploreRun(ctx, ledgerJob, ledgerConfig, harness.ExploreOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if x.Failed() {
			b.Fatalf("the ledger job was found not idempotent: %s", x.Minimal)
		}
		elapsed += time.Since(start)
		executed += x.Executed
		drawn += x.Checks
	}
	b.ReportMetric(float64(executed)/elapsed.Seconds(), "schedules/s")
	b.ReportMetric(float64(drawn)/elapsed.Seconds(), "draws/s")
	b.ReportMetric(float64(executed)/float64(b.N), "schedules/op")
}
