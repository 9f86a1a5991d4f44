package harness_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/internal/blame"
)

// A handler that calls t.Fatal (or a require assertion) on a redelivery
// exits its goroutine without returning: that was not detected, and the
// delivery waited for its DeliveryTimeout. It is now the user's t.Fatal
// inside that delivery, named with the delivery and the step, and the
// check does not wait (issue 27).
func TestHandlerGoexitIsReported(t *testing.T) {
	job := harness.Job{Name: "fatal-on-retry", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if _, err := d.DB.Exec(ctx, `UPDATE users SET is_email_verified = true WHERE id = 1`); err != nil {
			return err
		}
		if d.Attempt == 2 {
			// What t.Fatal and require's assertions end with; a real
			// t.Fatal here would fail this test too.
			runtime.Goexit()
		}
		return nil
	}}
	res, err := harness.Run(t.Context(), job, harness.Config{
		Setup:           []harness.Setup{harness.SQL(usersSchema)},
		Faults:          []faults.Fault{faults.RunTwice()},
		DeliveryTimeout: time.Hour, // a check waiting for it would hang the test
	})
	if res != nil {
		res.DropDatabases(context.Background())
	}
	require.Error(t, err)
	assert.Equal(t, `[twice] job "fatal-on-retry": the handler called t.Fatal, t.FailNow, t.Skip or a failing require assertion (runtime.Goexit) in delivery j1a2w2 (attempt 2) of schedule j1a1w1 > j1a2w2 (run-twice), instead of returning; it was in its own code after step 1 finished (UPDATE users SET is_email_verified = true WHERE id = 1), before step 2 reached the server. Return an error from the handler instead: the queue sees that, and twice compares it`, blame.Message(err))
	assert.True(t, blame.IsUser(err), "the user's error, not twice's")
}
