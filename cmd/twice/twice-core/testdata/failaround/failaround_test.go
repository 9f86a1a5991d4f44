// Package failaround holds an idempotent job whose test fails for a
// reason of its own after the check passed: twice must name that failure,
// not the check's passing line, and exit 1.
package failaround

import (
	"context"
	"testing"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

func TestFailsAroundCheck(t *testing.T) {
	harness.Check(t, harness.Job{
		Name: "mark-shipped",
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			_, err := d.DB.Exec(ctx, `UPDATE orders SET status = 'shipped' WHERE id = 7`)
			return err
		},
	}, harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL); INSERT INTO orders VALUES (7, 'paid');`)},
		Faults: []faults.Fault{faults.RunTwice()},
	})
	t.Fatal("the invoice total is 0, want 50")
}
