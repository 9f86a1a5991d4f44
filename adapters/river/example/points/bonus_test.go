package points_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twiceriver "github.com/runtwice/twice/adapters/river"
	"github.com/runtwice/twice/adapters/river/example/points"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

type grant func(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, now func() time.Time, accountID int64) error

// bonusJob checks the bonus worker with the producer's own function,
// passed unchanged: each insert runs it at its time on the harness clock.
func bonusJob[T river.JobArgs](name string, args T, account func(T) int64, produce grant) harness.Job {
	return twiceriver.Job(name, args,
		func(d *harness.Delivery) river.Worker[T] { return &points.BonusWorker[T]{Pool: d.DB, Account: account} },
		twiceriver.Producer(func(ctx context.Context, p twiceriver.Producing) error {
			return produce(ctx, p.Client, p.Tx, p.Now, 1)
		}))
}

// The producer's retry comes after its timeout (5s on the harness clock):
// it stamps another RequestedAt, so UniqueOpts{ByArgs: true} no longer
// matches the first job and the bonus is paid again. With the unique key
// on the account, River skips the retry.
func TestGrantBonusUnderProducerRetry(t *testing.T) {
	stamped := bonusJob("signup-bonus", points.BonusArgs{AccountID: 1},
		func(a points.BonusArgs) int64 { return a.AccountID }, points.GrantBonus)
	res, err := harness.Run(t.Context(), stamped, schema)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	var late *result.Scenario
	for i, sc := range res.Scenarios {
		if sc.Fault == faults.NameLateProducerRetry {
			late = &res.Scenarios[i]
		}
	}
	require.NotNil(t, late, "River dedups by args, so the default matrix retries late: %s", res)
	assert.Equal(t, "j1a1w1 > +5s late j2a1w2", late.Schedule.String())
	assert.NotEqual(t, result.Idempotent, late.Verdict, "the retry 5s later is a new job: %s", res)
	assert.Empty(t, late.Deliveries[1].NotDelivered)
	for _, sc := range res.Scenarios {
		if sc.Fault == faults.NameProducerRetry {
			assert.Equal(t, result.Idempotent, sc.Verdict, "a copy with the original has the same RequestedAt, and River skips it")
		}
	}

	keyed := bonusJob("signup-bonus-keyed", points.KeyedBonusArgs{AccountID: 1},
		func(a points.KeyedBonusArgs) int64 { return a.AccountID }, points.GrantKeyedBonus)
	res, err = harness.Run(t.Context(), keyed, schema)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	assert.True(t, res.Idempotent(), "%s", res)
	for _, sc := range res.Scenarios {
		if sc.Fault == faults.NameLateProducerRetry {
			assert.Contains(t, sc.Deliveries[1].NotDelivered, "River's UniqueOpts matched job")
		}
	}
}
