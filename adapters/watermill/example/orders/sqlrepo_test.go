package orders_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twicewatermill "github.com/runtwice/twice/adapters/watermill"
	"github.com/runtwice/twice/adapters/watermill/example/orders"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// repoAwarder builds the handler as the service's main does: the
// repository opened from a DSN (the worker process's, Worker.DSN) with
// sqlx and lib/pq, once per process.
func repoAwarder(t *testing.T, inbox bool) func(w *twicewatermill.Worker) cqrs.EventHandler {
	return func(w *twicewatermill.Worker) cqrs.EventHandler {
		repo, err := orders.OpenPointsRepo(w.DSN)
		require.NoError(t, err)
		t.Cleanup(func() { _ = repo.Close() })
		return orders.NewRepoAwarder(repo, inbox)
	}
}

// A repository on sqlx and lib/pq, opened from a DSN at startup, is
// checked as written: its statements are the delivery's steps (crashes
// fall between them), its pool reconnects for each delivery of the
// process, and the verdicts are those of the same handler on a pgx pool.
func TestRepositoryFromADSN(t *testing.T) {
	event := orders.OrderPlaced{OrderID: 9812}
	noProducer := faults.DefaultWithout(faults.NameProducerRetry, faults.NameConcurrentProducerRetry)
	res := run(t, twicewatermill.EventJob("award-points-repo", event, orders.ProcessorConfig(), repoAwarder(t, true)),
		harness.Config{Faults: noProducer})
	assert.True(t, res.Idempotent(), "%s", res)
	var sqls []string
	for _, s := range res.Steps {
		sqls = append(sqls, s.SQL)
	}
	assert.Contains(t, sqls, `UPDATE accounts SET points = points + $1 WHERE id = $2`, "the repository's statements are steps")
	var sameProcess bool
	for _, sc := range res.Scenarios {
		if sc.Schedule.String() == "j1a1w1!lostack > +30s j1a2w1" {
			sameProcess = true
			require.Len(t, sc.Deliveries, 2)
			assert.Empty(t, sc.Deliveries[1].Err, "the process's pool reconnected for its second delivery")
			assert.NotEmpty(t, sc.Deliveries[1].Steps, "and ran the repository's statements")
		}
	}
	assert.True(t, sameProcess, "a lost ack redelivers to the same process")

	res = run(t, twicewatermill.EventJob("award-points-repo", event, orders.ProcessorConfig(), repoAwarder(t, false)),
		harness.Config{Faults: []faults.Fault{faults.CrashBeforeAck(), faults.LostAck()}})
	for _, sc := range res.Scenarios {
		assert.Equal(t, result.NotIdempotent, sc.Verdict, "without its inbox the repository awards twice: %s", res)
	}
}
