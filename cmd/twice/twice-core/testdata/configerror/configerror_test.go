// Package configerror holds a check whose config is wrong (it would
// ignore a table that does not exist): the tool could not check the job,
// so twice exits 2.
package configerror

import (
	"context"
	"testing"

	"github.com/runtwice/twice/harness"
)

func TestIgnoresMissingTable(t *testing.T) {
	harness.Check(t, harness.Job{
		Name: "mark-shipped",
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			_, err := d.DB.Exec(ctx, `UPDATE orders SET status = 'shipped' WHERE id = 7`)
			return err
		},
	}, harness.Config{
		Setup: []harness.Setup{harness.SQL(`CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL); INSERT INTO orders VALUES (7, 'paid');`)},
		// A table the database does not have: a check that would ignore
		// nothing is refused.
		IgnoreTables: []string{"order_audit"},
	})
}
