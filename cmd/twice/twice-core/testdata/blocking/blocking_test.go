// Package blocking holds a check whose handler waits, in its first
// delivery, until a file exists: a run of twice that is mid-check for as
// long as its test needs, to be interrupted or killed there. Without
// TWICE_TEST_STARTED and TWICE_TEST_RELEASE it does not wait.
package blocking

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

func TestWaitsForRelease(t *testing.T) {
	started, release := os.Getenv("TWICE_TEST_STARTED"), os.Getenv("TWICE_TEST_RELEASE")
	harness.Check(t, harness.Job{
		Name: "wait-for-release",
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			if started != "" {
				if err := os.WriteFile(started, nil, 0o644); err != nil {
					return err
				}
				for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
					if _, err := os.Stat(release); err == nil {
						break
					}
					if time.Now().After(deadline) {
						return errors.New("never released")
					}
				}
			}
			_, err := d.DB.Exec(ctx, `UPDATE orders SET status = 'shipped' WHERE id = 7`)
			return err
		},
	}, harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL); INSERT INTO orders VALUES (7, 'paid');`)},
		Faults: []faults.Fault{faults.RunTwice()},
	})
}
