// Package registered holds a service that registers two kinds of work
// and checks one: twice report must name the other as a worker without a
// check.
package registered

import (
	"context"
	"testing"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

func TestService(t *testing.T) {
	set := harness.Job{
		Name: "set-points",
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			_, err := d.DB.Exec(ctx, `UPDATE customers SET points = 500 WHERE id = 77`)
			return err
		},
	}
	harness.CheckRegistered(t, "test registry", []string{"set-points", "reset-points"}, harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE customers (id bigint PRIMARY KEY, points int NOT NULL); INSERT INTO customers VALUES (77, 120);`)},
		Faults: []faults.Fault{faults.RunTwice()},
	}, harness.Sample{Kind: "set-points", Job: set})
}
