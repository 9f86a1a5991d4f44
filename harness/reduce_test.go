package harness_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/recordtb"
)

const rewardSchema = `
CREATE TABLE customers (id int PRIMARY KEY, points int NOT NULL);
CREATE TABLE ledger (order_id int NOT NULL, points int NOT NULL);
INSERT INTO customers VALUES (1, 0);
`

// rewardInATransaction checks for the ledger row, then adds the points
// and writes the row, in one transaction that sets a lock timeout first:
// six steps, of which BEGIN and SET LOCAL are free. Two deliveries that
// both check before either commits both reward; the second one's UPDATE
// waits on the first's row lock in between.
func rewardInATransaction(ctx context.Context, d *harness.Delivery) error {
	return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '20s'`); err != nil {
			return err
		}
		var done bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ledger WHERE order_id = 7)`).Scan(&done); err != nil {
			return err
		}
		if done {
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE customers SET points = points + 50 WHERE id = 1`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO ledger VALUES (7, 50)`)
		return err
	})
}

// The reduction leaves out orders that only move the BEGINs and SET
// LOCALs, and the check-then-act race in the middle of the transaction
// is still found: the scenarios that show it are among those run.
func TestReductionStillFindsTheRaceInTheMiddle(t *testing.T) {
	job := harness.Job{Name: "reward", Handler: rewardInATransaction}
	cfg := harness.Config{
		Setup:  []harness.Setup{harness.SQL(rewardSchema)},
		Faults: []faults.Fault{faults.ConcurrentDelivery()},
	}
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })

	require.Len(t, res.Steps, 6)
	assert.Equal(t, []bool{true, true, false, false, false, false}, faults.Free(res.Steps))
	require.Len(t, res.Reductions, 1)
	red := res.Reductions[0]
	assert.Equal(t, faults.NameConcurrentDelivery, red.Fault)
	assert.Nil(t, red.Diverged, "every delivery began with BEGIN and SET LOCAL")
	assert.Equal(t, 24, red.Orders)
	assert.Len(t, res.Scenarios, red.Orders, "no fallback, so only the reduced orders ran")
	assert.Positive(t, red.Pruned)

	require.False(t, res.Idempotent(), "the race between the check and the write must be found")
	for _, sc := range res.Failed() {
		// Each failing order has both checks before the first commit.
		assert.Contains(t, sc.Problems, result.Problem{Kind: result.StateDiffers, Table: "customers"}, "%s", sc.Schedule)
	}
	// The orders run are normal forms: no free step of delivery 2 right
	// before a step of delivery 1.
	for _, sc := range res.Scenarios {
		o := sc.Schedule.Order
		twos := 0
		for i, v := range o {
			if v == 2 {
				twos++
				if i+1 < len(o) && o[i+1] == 1 && twos <= 2 {
					t.Errorf("order %v: delivery 2's free step %d right before a step of delivery 1", o, twos)
				}
			}
		}
	}
}

// normalForm moves every step of delivery 1 before a free step of
// delivery 2, or a step of delivery 2 before which it is free, until none
// is left: the order of o's class the reduction runs.
func normalForm(free []bool, o []int) []int {
	o = append([]int(nil), o...)
	for swapped := true; swapped; {
		swapped = false
		ones, twos := 0, 0
		for i, v := range o {
			if v == 2 {
				twos++
				continue
			}
			ones++
			if i > 0 && o[i-1] == 2 && (free[ones-1] || free[twos-1]) {
				o[i-1], o[i] = 1, 2
				swapped = true
			}
		}
	}
	return o
}

// Every order the unreduced expansion tries ends as the order of its
// class that the reduction ran: run both on PostgreSQL and compare the
// verdicts and problems, order by order.
func TestReducedOrdersEndAsThePrunedOnes(t *testing.T) {
	job := harness.Job{Name: "reward", Handler: rewardInATransaction}
	cfg := harness.Config{
		Setup:  []harness.Setup{harness.SQL(rewardSchema)},
		Faults: []faults.Fault{faults.ConcurrentDelivery()},
	}
	reduced, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { reduced.DropDatabases(context.Background()) })
	byOrder := map[string]result.Scenario{}
	for _, sc := range reduced.Scenarios {
		byOrder[fmt.Sprint(sc.Schedule.Order)] = sc
	}

	free := faults.Free(reduced.Steps)
	cfg.Faults = nil
	for _, s := range faults.ConcurrentDelivery().Schedules(faults.Plan{Steps: reduced.Steps, Unreduced: true}) {
		if _, ran := byOrder[fmt.Sprint(s.Order)]; !ran {
			cfg.Faults = append(cfg.Faults, faults.Replay(s))
		}
	}
	require.NotEmpty(t, cfg.Faults)
	pruned, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { pruned.DropDatabases(context.Background()) })
	for _, sc := range pruned.Scenarios {
		nf := normalForm(free, sc.Schedule.Order)
		kept, ok := byOrder[fmt.Sprint(nf)]
		if !assert.True(t, ok, "order %v: its normal form %v did not run", sc.Schedule.Order, nf) {
			continue
		}
		assert.Equal(t, kept.Verdict, sc.Verdict, "order %v against %v", sc.Schedule.Order, nf)
		assert.Equal(t, kept.Problems, sc.Problems, "order %v against %v", sc.Schedule.Order, nf)
	}
}

// divergingJob takes BEGIN, SET LOCAL, INSERT, COMMIT on its clean run;
// a second attempt reads the log right after BEGIN instead of setting
// anything: a step the reduction took for free is not local there.
func divergingJob(ctx context.Context, d *harness.Delivery) error {
	return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
		second := `SET LOCAL lock_timeout = '20s'`
		if d.Attempt > 1 {
			second = `SELECT count(*) FROM log`
		}
		if _, err := tx.Exec(ctx, second); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO log VALUES (1, 'done') ON CONFLICT DO NOTHING`)
		return err
	})
}

// When a delivery diverges from the clean run at a free position, the
// orders the reduction left out run too, and the result says where.
func TestReductionFallsBackWhenTheSecondDeliveryDiverges(t *testing.T) {
	job := harness.Job{Name: "diverging", Handler: divergingJob}
	cfg := harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE log (attempt int NOT NULL, what text PRIMARY KEY)`)},
		Faults: []faults.Fault{faults.ConcurrentDelivery()},
	}
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })

	require.Len(t, res.Reductions, 1)
	red := res.Reductions[0]
	require.NotNil(t, red.Diverged, "attempt 2 took a SELECT where the clean run took SET LOCAL")
	assert.Equal(t, 2, red.Diverged.Delivery)
	assert.Equal(t, 2, red.Diverged.At)
	require.NotNil(t, red.Diverged.Took)
	assert.Equal(t, "SELECT count(*) FROM log", red.Diverged.Took.SQL)

	// Every order of the unreduced expansion ran, and none twice.
	plan := faults.Plan{Steps: res.Steps}
	reduced := faults.ConcurrentDelivery().Schedules(plan)
	plan.Unreduced = true
	want := map[string]bool{}
	for _, s := range append(reduced, faults.ConcurrentDelivery().Schedules(plan)...) {
		want[s.String()] = true
	}
	got := map[string]bool{}
	for _, sc := range res.Scenarios {
		assert.False(t, got[sc.Schedule.String()], "schedule %s ran twice", sc.Schedule)
		got[sc.Schedule.String()] = true
	}
	assert.Equal(t, want, got)
	assert.Equal(t, red.Orders+red.Pruned, len(res.Scenarios))
	assert.True(t, res.Idempotent(), "%s", res)
}

// Under -v a passing check says what the reduction did.
func TestReductionIsLogged(t *testing.T) {
	defer harness.SetVerbose(time.Hour)()
	rec := recordtb.New(t)
	job := harness.Job{Name: "logged", Handler: divergingJob}
	rec.Run(func(tb testing.TB) {
		harness.Check(tb, job, harness.Config{
			Setup:  []harness.Setup{harness.SQL(`CREATE TABLE log (attempt int NOT NULL, what text PRIMARY KEY)`)},
			Faults: []faults.Fault{faults.ConcurrentDelivery()},
		})
	})
	require.Empty(t, rec.Errors())
	var lines []string
	for _, l := range rec.Logs() {
		if strings.Contains(l, "concurrent-delivery: ") {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 1, "logs %q", rec.Logs())
	assert.Regexp(t, `^\[twice\] job "logged": concurrent-delivery: delivery 2 of j1a1w1 > j1a2w2@1:0 order [0-9,]+ took step 2: SELECT count\(\*\) FROM log, not the local step the reduction assumed there, so the \d+ interleavings left out ran too$`, lines[0])
}

// Sharded, a check that falls back runs each order the reduction left out
// in exactly one shard, at the same place (Scenario.Index) as unsharded,
// so the shards' reports join into the whole run's.
func TestReductionFallbackIsSharded(t *testing.T) {
	job := harness.Job{Name: "diverging", Handler: divergingJob}
	cfg := harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE log (attempt int NOT NULL, what text PRIMARY KEY)`)},
		Faults: []faults.Fault{faults.ConcurrentDelivery()},
	}
	type ran struct {
		schedule string
		verdict  result.Verdict
	}
	whole, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { whole.DropDatabases(context.Background()) })
	require.NotNil(t, whole.Reductions[0].Diverged)
	want := map[int]ran{}
	for _, sc := range whole.Scenarios {
		want[sc.Index] = ran{sc.Schedule.String(), sc.Verdict}
	}
	require.Len(t, want, len(whole.Scenarios), "two scenarios share a place")

	got := map[int]ran{}
	for i := 1; i <= 2; i++ {
		t.Setenv(harness.ShardEnv, result.Shard{Index: i, Count: 2}.String())
		res, err := harness.Run(t.Context(), job, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { res.DropDatabases(context.Background()) })
		require.NotNil(t, res.Reductions[0].Diverged, "shard %d/2 saw no divergence", i)
		for _, sc := range res.Scenarios {
			_, dup := got[sc.Index]
			require.False(t, dup, "place %d ran in two shards", sc.Index)
			got[sc.Index] = ran{sc.Schedule.String(), sc.Verdict}
		}
	}
	assert.Equal(t, want, got)
}
