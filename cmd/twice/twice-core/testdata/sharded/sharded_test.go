// Package sharded holds checks whose schedules split unevenly across
// three shards: twice report -shard i/3 of each, merged, must equal the
// whole run's report.
package sharded

import (
	"context"
	"testing"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

const schema = `CREATE TABLE customers (id bigint PRIMARY KEY, points int NOT NULL);
INSERT INTO customers VALUES (77, 120);
CREATE TABLE awards (job_id text PRIMARY KEY, points int NOT NULL);`

// TestAwardPoints: not idempotent (the points are added outside the
// award's transaction), as it says; several faults, several schedules
// each, and findings with the same difference in different shards.
func TestAwardPoints(t *testing.T) {
	harness.Check(t, harness.Job{
		Name: "award-points",
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			if _, err := d.DB.Exec(ctx, `UPDATE customers SET points = points + 50 WHERE id = 77`); err != nil {
				return err
			}
			_, err := d.DB.Exec(ctx, `INSERT INTO awards VALUES ($1, 50) ON CONFLICT DO NOTHING`, d.JobID)
			return err
		},
	}, harness.Config{
		Setup:         []harness.Setup{harness.SQL(schema)},
		Faults:        []faults.Fault{faults.RunTwice(), faults.CrashAtEveryStep(), faults.CrashBeforeAck(), faults.ConcurrentDelivery()},
		ExpectFinding: "the points are added before the award is recorded, outside one transaction",
	})
}

// TestSetPoints: idempotent, with one schedule, so two of three shards
// run none.
func TestSetPoints(t *testing.T) {
	harness.Check(t, harness.Job{
		Name: "set-points",
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			_, err := d.DB.Exec(ctx, `UPDATE customers SET points = 500 WHERE id = 77`)
			return err
		},
	}, harness.Config{
		Setup:  []harness.Setup{harness.SQL(schema)},
		Faults: []faults.Fault{faults.RunTwice()},
	})
}
