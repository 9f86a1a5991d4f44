// Package crash checks an idempotent job, then its test binary exits in
// the middle of a test: twice report must exit 2 and say which test.
package crash

import (
	"context"
	"os"
	"testing"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

func TestSetPoints(t *testing.T) {
	harness.Check(t, harness.Job{
		Name: "set-points",
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			_, err := d.DB.Exec(ctx, `UPDATE customers SET points = 170 WHERE id = 77`)
			return err
		},
	}, harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE customers (id bigint PRIMARY KEY, points int NOT NULL); INSERT INTO customers VALUES (77, 120);`)},
		Faults: []faults.Fault{faults.RunTwice()},
	})
}

func TestZExits(t *testing.T) {
	os.Exit(3)
}
