package points_test

import (
	"context"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twiceriver "github.com/runtwice/twice/adapters/river"
	"github.com/runtwice/twice/adapters/river/example/points"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// River runs in a schema of its own, as a project that keeps it apart
// from its tables ("metadata") configures it: migrated there, every
// client and statement of the check uses it, and the verdicts are those
// of River in public.
func TestRiverInANamedSchema(t *testing.T) {
	unique := twiceriver.InsertOpts(&river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}})
	reward := twiceriver.Job("reward-order", points.RewardArgs{OrderID: 9812},
		func(d *harness.Delivery) river.Worker[points.RewardArgs] { return &points.RewardWorker{Pool: d.DB} },
		unique, twiceriver.Schema("metadata"))
	res, err := harness.Run(t.Context(), reward, schema)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	assert.True(t, res.Idempotent(), "%s", res)
	var names []string
	for _, tbl := range res.Reference.Tables {
		names = append(names, tbl.Name)
		if tbl.Name == "metadata.river_job" {
			assert.Empty(t, tbl.Rows, "the job's own row is left out; child jobs would be compared")
		}
	}
	assert.Contains(t, names, "metadata.river_job")
	assert.NotContains(t, names, "river_job", "nothing of River's in public")
	assert.NotContains(t, names, "metadata.river_queue", "River's bookkeeping is left out")
	var crashes int
	for _, sc := range res.Scenarios {
		if sc.Fault == "crash-before-ack" {
			crashes++
			require.Len(t, sc.Deliveries, 2)
			assert.Contains(t, sc.Deliveries[1].NotDelivered, "completed", "the job completed in the worker's transaction, in metadata.river_job")
		}
	}
	assert.Equal(t, 1, crashes)

	ledger := twiceriver.Job("ledger-order", points.LedgerArgs{OrderID: 9812},
		func(d *harness.Delivery) river.Worker[points.LedgerArgs] { return &points.LedgerWorker{Pool: d.DB} },
		unique, twiceriver.Schema("metadata"))
	res, err = harness.Run(t.Context(), ledger, schema)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	assert.False(t, res.Idempotent(), "the ledger line is written again before River's completer runs")
	found := false
	for _, sc := range res.Failed() {
		for _, c := range sc.Culprits {
			found = found || c.Pattern == result.InsertWithoutKey
		}
	}
	assert.True(t, found, "%s", res)

	_, err = harness.Run(t.Context(), twiceriver.Job("reward-order", points.RewardArgs{OrderID: 9812},
		func(d *harness.Delivery) river.Worker[points.RewardArgs] { return &points.RewardWorker{Pool: d.DB} },
		twiceriver.Schema("meta-data")), schema)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `River refuses JobTimeout 0s with RescueAfter 0s and Schema "meta-data"`)
}
