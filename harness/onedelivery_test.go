package harness_test

import (
	"context"
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

// rewardOnce checks whether the order was rewarded and rewards it, in one
// transaction: two deliveries that both check before either commits
// reward twice.
func rewardOnce(ctx context.Context, d *harness.Delivery) error {
	return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
		var points int
		if err := tx.QueryRow(ctx, `SELECT points FROM rewards WHERE order_id = 1`).Scan(&points); err != nil {
			return err
		}
		if points > 0 {
			return nil
		}
		_, err := tx.Exec(ctx, `UPDATE rewards SET points = points + 50 WHERE order_id = 1`)
		return err
	})
}

// bounceOnce records a bounce unless one is recorded, in one autocommit
// statement without a unique constraint: only two deliveries whose
// statements overlap (a held commit) record it twice.
func bounceOnce(ctx context.Context, d *harness.Delivery) error {
	_, err := d.DB.Exec(ctx, `INSERT INTO bounces (email) SELECT 'a@b' WHERE NOT EXISTS (SELECT 1 FROM bounces WHERE email = 'a@b')`)
	return err
}

func oneDeliveryConfig() harness.Config {
	return harness.Config{
		Setup:  []harness.Setup{harness.SQL(rewardsSchema), harness.SQL(`CREATE TABLE bounces (email text NOT NULL)`)},
		Faults: []faults.Fault{faults.ConcurrentDelivery()},
	}
}

// oneDeliveryHandlers race in two ways: transactions interleaved step by
// step, and one statement overlapped with itself (a held commit).
var oneDeliveryHandlers = []struct {
	name    string
	handler harness.Handler
}{
	{"interleaved transactions", rewardOnce},
	{"overlapped statements", bounceOnce},
}

// A queue that hands a job to one delivery at a time refuses the second
// delivery of concurrent-delivery in every order, so the check runs one
// order, and its verdict is that of every order.
func TestQueueOneDeliveryAtATimeRunsOneOrder(t *testing.T) {
	for _, tt := range oneDeliveryHandlers {
		t.Run(tt.name, func(t *testing.T) {
			refusing := tableQueue{redeliver: time.Hour, holdRunning: true}
			every := runQueue(t, harness.Job{Name: "every", Queue: refusing, Handler: tt.handler}, oneDeliveryConfig())
			require.Greater(t, len(every.Scenarios), 1)
			for _, sc := range every.Scenarios {
				require.Len(t, sc.Deliveries, 2)
				assert.NotEmpty(t, sc.Deliveries[1].NotDelivered, "%s: the queue handed out a running job", sc.Schedule)
			}

			refusing.oneDelivery = true
			res := runQueue(t, harness.Job{Name: "one", Queue: refusing, Handler: tt.handler}, oneDeliveryConfig())
			require.Len(t, res.Scenarios, 1, "%s", res)
			assert.Equal(t, every.Scenarios[0].Schedule.String(), res.Scenarios[0].Schedule.String())
			assert.Equal(t, "the job is running", res.Scenarios[0].Deliveries[1].NotDelivered)
			require.Len(t, res.Reductions, 1)
			red := res.Reductions[0]
			assert.Nil(t, red.HandedOut)
			assert.Nil(t, red.Diverged, "the reduction has nothing to confirm when the second delivery never ran")
			assert.Equal(t, 1, red.Orders)
			assert.Positive(t, red.Refused)
			// Without the rule, the partial-order reduction's fallback ran
			// every order too (the second delivery took none of its steps).
			assert.Equal(t, len(every.Scenarios)-1, red.Pruned, "every order that ran without the rule but the one")
			assert.Equal(t, every.Idempotent(), res.Idempotent())
			assert.True(t, res.Idempotent(), "%s", res)
		})
	}
}

// scheduleVerdicts maps each scenario's schedule to its verdict.
func scheduleVerdicts(t *testing.T, res *harness.Result) map[string]result.Verdict {
	t.Helper()
	out := map[string]result.Verdict{}
	for _, sc := range res.Scenarios {
		_, dup := out[sc.Schedule.String()]
		require.False(t, dup, "schedule %s ran twice", sc.Schedule)
		out[sc.Schedule.String()] = sc.Verdict
	}
	return out
}

// A queue that says it hands a job to one delivery at a time but hands
// out the second delivery all the same gets every order the rule left
// out run as well: the same scenarios and verdicts as without the rule,
// the races among them found.
func TestQueueOneDeliveryAtATimeFallsBackWhenHandedOut(t *testing.T) {
	for _, tt := range oneDeliveryHandlers {
		t.Run(tt.name, func(t *testing.T) {
			handing := tableQueue{redeliver: time.Hour}
			every := runQueue(t, harness.Job{Name: "every", Queue: handing, Handler: tt.handler}, oneDeliveryConfig())
			require.False(t, every.Idempotent(), "the race must be found without the rule")

			handing.oneDelivery = true
			res := runQueue(t, harness.Job{Name: "claims", Queue: handing, Handler: tt.handler}, oneDeliveryConfig())
			require.Len(t, res.Reductions, 1)
			red := res.Reductions[0]
			require.NotNil(t, red.HandedOut, "the queue handed out the second delivery")
			assert.Equal(t, res.Scenarios[0].Schedule.String(), red.HandedOut.String())
			assert.Empty(t, res.Scenarios[0].Deliveries[1].NotDelivered)
			assert.Positive(t, red.Refused)
			assert.Equal(t, scheduleVerdicts(t, every), scheduleVerdicts(t, res))
			assert.False(t, res.Idempotent(), "%s", res)
			for i, sc := range res.Scenarios {
				assert.Equal(t, i, sc.Index, "%s", sc.Schedule)
			}
		})
	}
}

// Sharded, every shard learns whether the queue handed out the second
// delivery, although only one was dealt the scenario that shows it: when
// it did, each order left out runs in exactly one shard, at its
// unsharded place; when it did not, none runs.
func TestQueueOneDeliveryAtATimeIsSharded(t *testing.T) {
	for _, tt := range []struct {
		name   string
		queue  tableQueue
		handed bool
	}{
		{"handed out", tableQueue{redeliver: time.Hour, oneDelivery: true}, true},
		{"refused", tableQueue{redeliver: time.Hour, holdRunning: true, oneDelivery: true}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			job := harness.Job{Name: "sharded", Queue: tt.queue, Handler: rewardOnce}
			type ran struct {
				schedule string
				verdict  result.Verdict
			}
			whole := runQueue(t, job, oneDeliveryConfig())
			require.Equal(t, tt.handed, whole.Reductions[0].HandedOut != nil)
			want := map[int]ran{}
			for _, sc := range whole.Scenarios {
				want[sc.Index] = ran{sc.Schedule.String(), sc.Verdict}
			}
			require.Len(t, want, len(whole.Scenarios), "two scenarios share a place")

			got := map[int]ran{}
			for i := 1; i <= 2; i++ {
				t.Setenv(harness.ShardEnv, result.Shard{Index: i, Count: 2}.String())
				res := runQueue(t, job, oneDeliveryConfig())
				require.Equal(t, tt.handed, res.Reductions[0].HandedOut != nil, "shard %d/2", i)
				for _, sc := range res.Scenarios {
					_, dup := got[sc.Index]
					require.False(t, dup, "place %d ran in two shards", sc.Index)
					got[sc.Index] = ran{sc.Schedule.String(), sc.Verdict}
				}
			}
			assert.Equal(t, want, got)
		})
	}
}

// Under -v a passing check says that it ran one order for a queue that
// hands a job to one delivery at a time.
func TestQueueOneDeliveryAtATimeIsLogged(t *testing.T) {
	defer harness.SetVerbose(time.Hour)()
	rec := recordtb.New(t)
	job := harness.Job{Name: "logged", Queue: tableQueue{redeliver: time.Hour, holdRunning: true, oneDelivery: true}, Handler: rewardOnce}
	rec.Run(func(tb testing.TB) { harness.Check(tb, job, oneDeliveryConfig()) })
	require.Empty(t, rec.Errors())
	var lines []string
	for _, l := range rec.Logs() {
		if strings.Contains(l, "concurrent-delivery: ") {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 1, "logs %q", rec.Logs())
	assert.Regexp(t, `^\[twice\] job "logged": concurrent-delivery: 1 interleaving run, \d+ left out: the queue hands a job to one delivery at a time and refused the second delivery, so their order cannot matter$`, lines[0])
}
