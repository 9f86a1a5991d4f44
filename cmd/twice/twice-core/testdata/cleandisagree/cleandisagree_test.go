// Package cleandisagree holds a check whose two clean runs disagree: its
// handler keeps a once-flag in memory, so only the first delivery ever
// made writes. Beside it, a job that is not idempotent: twice report must
// show both, each as what it is.
package cleandisagree

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

func TestOnceInMemory(t *testing.T) {
	var done atomic.Bool
	harness.Check(t, harness.Job{
		Name: "once-in-memory",
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			if !done.CompareAndSwap(false, true) {
				return nil
			}
			_, err := d.DB.Exec(ctx, `UPDATE customers SET points = points + 50 WHERE id = 77`)
			return err
		},
	}, harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE customers (id bigint PRIMARY KEY, points int NOT NULL); INSERT INTO customers VALUES (77, 120);`)},
		Faults: []faults.Fault{faults.RunTwice()},
		// Its later deliveries skip on the flag and take no step, and its
		// clean runs disagree, each of which fails a check by default;
		// accepted here, so that the report shows the clean runs'
		// disagreement as the job's problem.
		AcceptWarnings: []result.WarningKind{result.NoStepTaken, result.CleanRunsDisagree},
	})
}

func TestAddPoints(t *testing.T) {
	harness.Check(t, harness.Job{
		Name: "add-points",
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			_, err := d.DB.Exec(ctx, `UPDATE customers SET points = points + 50 WHERE id = 77`)
			return err
		},
	}, harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE customers (id bigint PRIMARY KEY, points int NOT NULL); INSERT INTO customers VALUES (77, 120);`)},
		Faults: []faults.Fault{faults.RunTwice()},
	})
}
