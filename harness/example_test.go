package harness_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// A job that adds to a balance on every delivery is not idempotent: both
// the redelivery and the producer's retry pay twice.
func ExampleRun() {
	job := harness.Job{
		Name: "reward-by-increment",
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			_, err := d.DB.Exec(ctx, `UPDATE customers SET points = points + 50 WHERE id = 77`)
			return err
		},
	}
	res, err := harness.Run(context.Background(), job, harness.Config{
		Setup: []harness.Setup{harness.SQL(`
			CREATE TABLE customers (id bigint PRIMARY KEY, points int NOT NULL);
			INSERT INTO customers VALUES (77, 120);`)},
		Faults: []faults.Fault{faults.RunTwice(), faults.ProducerRetry()},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.DropDatabases(context.Background())
	for _, s := range res.Scenarios {
		fmt.Printf("%s (%s): %s\n", s.Fault, s.Schedule, s.Verdict)
		for _, d := range s.StateDiff {
			fmt.Println(d)
		}
	}
	// Output:
	// run-twice (j1a1w1 > j1a2w2): not-idempotent
	// table "customers" after run-twice mismatch (-once +twice):
	//   []map[string]any{
	//   	{
	//   		"id":     int64(77),
	// - 		"points": int64(170),
	// + 		"points": int64(220),
	//   	},
	//   }
	// producer-retry (j1a1w1 > j2a1w2): not-idempotent
	// table "customers" after producer-retry mismatch (-once +twice):
	//   []map[string]any{
	//   	{
	//   		"id":     int64(77),
	// - 		"points": int64(170),
	// + 		"points": int64(220),
	//   	},
	//   }
}

// Check belongs in a test next to the job: it runs the default fault
// matrix and fails the test with every finding in one message, or with
// "[twice] internal: ..." when the check itself cannot run. (This example
// is compiled, not run: it needs the test's *testing.T.)
func ExampleCheck() {
	var t *testing.T // the test's: func TestRewardOrder(t *testing.T) { ... }

	job := harness.Job{
		Name: "reward-order",
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			// Idempotent: the ledger's unique (order_id) makes a second
			// delivery add nothing.
			_, err := d.DB.Exec(ctx, `
				WITH added AS (
				  INSERT INTO points_ledger (order_id, customer_id, points) VALUES (9812, 77, 50)
				  ON CONFLICT (order_id) DO NOTHING
				  RETURNING customer_id, points)
				UPDATE customers c SET points = c.points + added.points
				FROM added WHERE c.id = added.customer_id`)
			return err
		},
	}
	res := harness.Check(t, job, harness.Config{
		Setup: []harness.Setup{harness.SQL(`
			CREATE TABLE customers (id bigint PRIMARY KEY, points int NOT NULL);
			CREATE TABLE points_ledger (order_id bigint PRIMARY KEY, customer_id bigint NOT NULL, points int NOT NULL);
			INSERT INTO customers VALUES (77, 120);`)},
	})
	if res != nil && res.Outcome == result.OutcomeIdempotent {
		t.Logf("%d scenarios, all idempotent", len(res.Scenarios))
	}
}
