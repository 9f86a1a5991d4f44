package harness_test

import (
	"context"
	"fmt"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
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
