package queue_test

import (
	"context"
	"fmt"
	"time"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
)

// A job without a queue adapter is delivered by queue.Model; its
// visibility timeout says how far the clock moves before the job is
// handed out again after its worker died.
func ExampleModel() {
	job := harness.Job{
		Name: "set-points",
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			_, err := d.DB.Exec(ctx, `UPDATE customers SET points = 50 WHERE id = 77`)
			return err
		},
		Queue: queue.Model{VisibilityTimeout: 5 * time.Minute},
	}
	res, err := harness.Run(context.Background(), job, harness.Config{
		Setup: []harness.Setup{harness.SQL(`
			CREATE TABLE customers (id bigint PRIMARY KEY, points int NOT NULL);
			INSERT INTO customers VALUES (77, 120);`)},
		Faults: []faults.Fault{faults.CrashBeforeAck()},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.DropDatabases(context.Background())
	for _, s := range res.Scenarios {
		fmt.Printf("%s (%s): %s\n", s.Fault, s.Schedule, s.Verdict)
	}
	// Output:
	// crash-before-ack (j1a1w1!crash > +5m j1a2w2): idempotent
}
