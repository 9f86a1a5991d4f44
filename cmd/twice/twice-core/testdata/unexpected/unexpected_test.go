// Package unexpected holds a job that is not idempotent and a test that
// does not expect it: twice report must exit 1.
package unexpected

import (
	"context"
	"testing"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

func TestAddPoints(t *testing.T) {
	harness.Check(t, harness.Job{
		Name: "add-points",
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			_, err := d.DB.Exec(ctx, `UPDATE customers SET points = points + 50 WHERE id = 77`)
			return err
		},
	}, harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE customers (id bigint PRIMARY KEY, points int NOT NULL); INSERT INTO customers VALUES (77, 120);`)},
		Faults: []faults.Fault{faults.RunTwice(), faults.CrashBeforeAck()},
	})
}
