package harness_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/recordtb"
)

// alternatingJob adds a hit on every other redelivery it is given: the
// first scenario with a redelivery fails, and the same schedule run
// again passes.
func alternatingJob() harness.Job {
	var redeliveries atomic.Int64
	return harness.Job{Name: "alternating", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if d.Attempt > 1 && redeliveries.Add(1)%2 == 1 {
			_, err := d.DB.Exec(ctx, `UPDATE counters SET n = n + 1`)
			return err
		}
		return nil
	}}
}

// A finding that does not repeat on a fresh database is flaky, with both
// runs kept, and the check fails: it is neither a finding nor a pass.
func TestFindingThatDoesNotRepeatIsFlaky(t *testing.T) {
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.CrashBeforeAck()}
	rec := recordtb.New(t)
	var res *harness.Result
	rec.Run(func(tb testing.TB) { res = harness.Check(tb, alternatingJob(), cfg) })
	require.NotNil(t, res)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })
	assert.Equal(t, result.OutcomeFlaky, res.Outcome)
	require.Len(t, res.Scenarios, 1)
	sc := res.Scenarios[0]
	assert.Equal(t, result.Flaky, sc.Verdict)
	require.NotNil(t, sc.Rerun, "the flaky scenario keeps its rerun")
	assert.Equal(t, result.Idempotent, sc.Rerun.Verdict)
	assert.Equal(t, []result.Problem{{Kind: result.StateDiffers, Table: "counters"}}, sc.Problems, "the first run's problems are kept")
	assert.False(t, res.Idempotent(), "a flaky scenario is not a pass")
	errs := rec.Errors()
	require.Len(t, errs, 1, "the test fails")
	assert.Contains(t, errs[0], `[twice] flaky: job "alternating": 1 of 1 scenarios failed, and not the same way when run again on a fresh database`)
	assert.Contains(t, errs[0], "flaky: run again on a fresh database, the same schedule was idempotent")
	assert.NotContains(t, errs[0], "not idempotent: job")
}

// A finding that repeats is confirmed: it stays not idempotent, with its
// rerun's problems the same.
func TestFindingThatRepeatsIsConfirmed(t *testing.T) {
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.CrashBeforeAck()}
	res, err := harness.Run(t.Context(), hitJob, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })
	assert.Equal(t, result.OutcomeFinding, res.Outcome)
	require.Len(t, res.Scenarios, 1)
	sc := res.Scenarios[0]
	assert.Equal(t, result.NotIdempotent, sc.Verdict)
	require.NotNil(t, sc.Rerun)
	assert.Equal(t, result.NotIdempotent, sc.Rerun.Verdict)
	assert.Equal(t, sc.Problems, sc.Rerun.Problems)
	assert.NotEmpty(t, sc.Database, "the first run's database is the evidence")
}

// Scenarios that pass are not run again.
func TestPassingScenariosAreNotRerun(t *testing.T) {
	var calls atomic.Int64
	job := harness.Job{Name: "quiet", Handler: func(ctx context.Context, d *harness.Delivery) error {
		calls.Add(1)
		_, err := d.DB.Exec(ctx, `SELECT 1`)
		return err
	}}
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.CrashBeforeAck()}
	cfg.ExpectNoWork = "it only reads"
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	assert.Equal(t, result.OutcomeIdempotent, res.Outcome)
	require.Len(t, res.Scenarios, 1)
	assert.Nil(t, res.Scenarios[0].Rerun)
	// Two clean runs, then the scenario's two deliveries.
	assert.EqualValues(t, 4, calls.Load())
}

// A pass the executor decided by timing (here a step granted while
// another delivery's statement waits on a lock a third one holds) is run
// again like a failure: when the rerun fails, the scenario is flaky, not
// a pass, in the result and in the test's failure.
func TestRacedPassThatFailsWhenRunAgainIsFlaky(t *testing.T) {
	// First attempts, each the first to take the lock in its run: two
	// clean runs, the scenario's run, its rerun.
	var firsts atomic.Int64
	job := lockThenSet("raced", func(d *harness.Delivery) int {
		if d.Attempt == 1 {
			firsts.Add(1)
		}
		if firsts.Load() == 4 {
			return 2 // the rerun's deliveries write another value
		}
		return 1
	})
	// d1 takes the lock, d2's FOR UPDATE waits on it, and d3's BEGIN is
	// granted beside that wait: d1 may let the lock go, for all the
	// executor knows, and d2 then runs beside d3.
	sched, err := faults.Parse("j1a1w1 > j1a2w2@1:0 > j1a3w3@1:0 order 1,1,2,2,3,3,1,1,2,2,3,3")
	require.NoError(t, err)
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.Replay(sched)}
	rec := recordtb.New(t)
	var res *harness.Result
	rec.Run(func(tb testing.TB) { res = harness.Check(tb, job, cfg) })
	require.NotNil(t, res)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })
	require.Len(t, res.Scenarios, 1)
	sc := res.Scenarios[0]
	assert.Contains(t, sc.Races, result.Race{Kind: result.StepBeside, Delivery: 3, Other: 2, Step: 1})
	assert.Empty(t, sc.Problems, "the first run passed")
	require.NotNil(t, sc.Rerun, "a raced pass is run again")
	assert.Equal(t, result.NotIdempotent, sc.Rerun.Verdict)
	assert.Equal(t, result.Flaky, sc.Verdict)
	assert.Equal(t, result.OutcomeFlaky, res.Outcome)
	assert.False(t, res.Idempotent(), "a flaky scenario is not a pass")
	assert.NotEmpty(t, sc.Database, "the rerun's failure is the evidence")
	errs := rec.Errors()
	require.Len(t, errs, 1, "the test fails")
	assert.Contains(t, errs[0], `flaky: job "raced": 1 of 1 scenarios did not end the same way when run again on a fresh database (some passed, then failed)`)
	assert.Contains(t, errs[0], "flaky: it passed, but the executor decided by timing: step 1 of delivery 3 was granted while a step of delivery 2 was still in flight;")
	assert.Contains(t, errs[0], ", and run again on a fresh database the same schedule failed: ")
}

// lockThenSet is a job that locks the counter row, then sets it to n(d),
// asked with the lock held.
func lockThenSet(name string, n func(*harness.Delivery) int) harness.Job {
	return harness.Job{Name: name, Handler: func(ctx context.Context, d *harness.Delivery) error {
		return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT n FROM counters WHERE name = 'hits' FOR UPDATE`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE counters SET n = $1 WHERE name = 'hits'`, n(d))
			return err
		})
	}}
}

// replayed runs job's schedule sched alone, and its result.
func replayed(t *testing.T, job harness.Job, sched string) *harness.Result {
	t.Helper()
	s, err := faults.Parse(sched)
	require.NoError(t, err)
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.Replay(s)}
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })
	require.Len(t, res.Scenarios, 1)
	return res
}

// A raced pass whose rerun passes too stays a pass, its rerun kept.
func TestRacedPassThatPassesAgainIsAPass(t *testing.T) {
	one := func(*harness.Delivery) int { return 1 }
	res := replayed(t, lockThenSet("raced-quiet", one), "j1a1w1 > j1a2w2@1:0 > j1a3w3@1:0 order 1,1,2,2,3,3,1,1,2,2,3,3")
	assert.Equal(t, result.OutcomeIdempotent, res.Outcome)
	sc := res.Scenarios[0]
	assert.NotEmpty(t, sc.Races)
	require.NotNil(t, sc.Rerun)
	assert.Equal(t, result.Idempotent, sc.Verdict)
	assert.Equal(t, result.Idempotent, sc.Rerun.Verdict)
}

// A step granted while the other delivery's statement waits on a lock
// the granted delivery alone holds decides nothing by timing: the waiting
// statement goes on only once the COMMIT has let the lock go, and the
// executor then waits for it before the next grant. The pass is not run
// again.
func TestGrantBehindItsOwnLockIsNoRace(t *testing.T) {
	one := func(*harness.Delivery) int { return 1 }
	// d1 takes the lock, d2's FOR UPDATE waits on it; d1's UPDATE and
	// COMMIT are granted beside that wait.
	res := replayed(t, lockThenSet("one-lock", one), "j1a1w1 > j1a2w2@1:0 order 1,1,2,2,1,1,2,2")
	sc := res.Scenarios[0]
	assert.Equal(t, result.Idempotent, sc.Verdict)
	assert.Equal(t, []int{1, 1, 2, 2, 1, 1, 2, 2}, sc.Order)
	assert.Equal(t, 1, sc.LockWaits, "d2's FOR UPDATE waited on d1's lock")
	assert.Empty(t, sc.Races)
	assert.Nil(t, sc.Rerun)
}
