package harness_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
)

// A handler that hands its work to a goroutine and returns is acked
// before that work is done (issue 38, Why 4): production acks at the
// return, so a crash then loses the write or the email, and nothing
// redelivers the job. The harness closed the delivery's connections at
// the return, the late write failed unseen, and the check passed. The
// delivery is now watched until the goroutines its handler started end:
// what they do is found, naming the delivery and the calls. The same
// handler waiting for its goroutine passes.
func TestWorkAfterTheAckIsFound(t *testing.T) {
	lateWrite := func(ctx context.Context, d *harness.Delivery) error {
		_, err := d.DB.Exec(context.Background(), `UPDATE orders SET n = 1 WHERE id = 9812`)
		return err
	}
	lateMail := func(ctx context.Context, d *harness.Delivery) error {
		return d.Mail().Send(context.Background(), effects.Email{To: "a@example.com", Subject: "shipped"})
	}
	for _, tc := range []struct {
		name string
		late func(context.Context, *harness.Delivery) error
		call string
	}{
		{"a write", lateWrite, "UPDATE orders SET n = 1 WHERE id = 9812"},
		{"an email", lateMail, "email"},
	} {
		for _, wait := range []bool{false, true} {
			name := tc.name + " after the return"
			if wait {
				name = tc.name + " waited for"
			}
			t.Run(name, func(t *testing.T) {
				job := harness.Job{Name: "late", Handler: func(ctx context.Context, d *harness.Delivery) error {
					if _, err := d.DB.Exec(ctx, `SELECT n FROM orders WHERE id = 9812`); err != nil {
						return err
					}
					var wg sync.WaitGroup
					returned := make(chan struct{})
					wg.Go(func() {
						if !wait {
							<-returned
							time.Sleep(100 * time.Millisecond) // well after the harness saw the return
						}
						_ = tc.late(ctx, d)
					})
					if wait {
						wg.Wait()
					}
					close(returned)
					return nil
				}}
				cfg := harness.Config{Setup: []harness.Setup{harness.SQL(ordersFixture)},
					Faults: []faults.Fault{faults.RunTwice()}}
				res, err := harness.Run(t.Context(), job, cfg)
				require.NoError(t, err)
				t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
				var late []result.Problem
				for _, sc := range res.Scenarios {
					for _, p := range sc.Problems {
						if p.Kind == result.WorkAfterAck {
							late = append(late, p)
						}
					}
				}
				if wait {
					assert.Empty(t, late)
					if tc.call == "email" {
						assert.False(t, res.Idempotent(), "an email on every delivery is found")
					} else {
						assert.True(t, res.Idempotent(), "%v", res.Failed())
					}
					return
				}
				require.False(t, res.Idempotent())
				require.NotEmpty(t, late, "%v", res.Failed())
				assert.Equal(t, "j1a1w1", late[0].Delivery)
				require.Len(t, late[0].Calls, 1)
				assert.Contains(t, late[0].Calls[0], tc.call)
			})
		}
	}
}
