package harness_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

// A handler that runs DDL on its second attempt only: the clean runs
// never see the new table and column, so the plan their snapshots made
// lacks them, and the scenario's snapshot must notice the changed catalog
// and read them: both show as differences.
func TestDDLInHandlerIsSnapshotted(t *testing.T) {
	job := harness.Job{Name: "ddl-on-retry", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if d.Attempt > 1 {
			for _, sql := range []string{
				`CREATE TABLE retries (job text, attempt int)`,
				`ALTER TABLE customers ADD COLUMN retried bool NOT NULL DEFAULT true`,
			} {
				if _, err := d.DB.Exec(ctx, sql); err != nil {
					return err
				}
			}
			if _, err := d.DB.Exec(ctx, `INSERT INTO retries VALUES ($1, $2)`, d.JobID, d.Attempt); err != nil {
				return err
			}
		}
		_, err := d.DB.Exec(ctx, `UPDATE customers SET points = 170 WHERE id = 77`)
		return err
	}}
	cfg := harness.Config{
		Setup:  []harness.Setup{harness.SQL(ledgerSchema)},
		Faults: []faults.Fault{faults.RunTwice(), faults.ProducerRetry()},
	}
	for range 2 { // the second time, the Snapshotter has plans from the first
		res, err := harness.Run(t.Context(), job, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { res.DropDatabases(context.Background()) })
		require.NotEmpty(t, res.Scenarios)
		for _, sc := range res.Scenarios {
			var tables []string
			for _, d := range sc.StateDiff {
				tables = append(tables, d.Table)
			}
			slices.Sort(tables)
			if sc.Deliveries[len(sc.Deliveries)-1].Attempt < 2 {
				assert.Empty(t, tables, "scenario %s", sc.Schedule)
				continue
			}
			assert.Equal(t, []string{"customers", "retries"}, tables, "scenario %s", sc.Schedule)
		}
	}
}
