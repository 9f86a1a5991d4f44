package harness_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// A handler that panics on its redelivery only: the scenario waited for
// the queue's retry, which succeeded, and passed in silence, the panic
// named only in the delivery's error. The panic settles the scenario: it
// is a finding whatever the rest does, so the retry is not run and not
// waited for (issue 27).
func TestPanicSettlesTheScenario(t *testing.T) {
	job := harness.Job{Name: "panics-once", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if _, err := d.DB.Exec(ctx, `UPDATE users SET is_email_verified = true WHERE id = 1`); err != nil {
			return err
		}
		if d.Attempt == 2 {
			panic(errors.New("nil map"))
		}
		return nil
	}}
	res := replay(t, job, "j1a1w1 > j1a2w2", func(c *harness.Config) { c.Setup = []harness.Setup{harness.SQL(usersSchema)} })
	sc := res.Scenarios[0]
	assert.Equal(t, result.NotIdempotent, sc.Verdict, "%+v", sc.Problems)
	require.Len(t, sc.Deliveries, 2, "no queue retry after the panic: %+v", sc.Deliveries)
	assert.Contains(t, sc.Deliveries[1].Err, "handler panicked: nil map")
	require.Len(t, sc.Problems, 1, "%+v", sc.Problems)
	assert.Equal(t, result.DidNotComplete, sc.Problems[0].Kind)
	assert.Equal(t, "job twice-job-1: delivery j1a2w2 (attempt 2) of schedule j1a1w1 > j1a2w2 (replay) panicked, so the scenario stopped there: "+
		"a handler that panics is a finding whatever its other deliveries and the queue's retries do: handler panicked: nil map", sc.Problems[0].Detail)
	require.NotNil(t, sc.Rerun, "the finding was confirmed")
	assert.Equal(t, result.NotIdempotent, sc.Rerun.Verdict)
}

// A delivery that panics while another of the scenario runs, deaf to its
// context, in its own code: the scenario stops at the panic instead of
// waiting for the other's DeliveryTimeout (an hour here: a harness that
// waited would hang the test), and the other dies, named as stopped for
// the panic. Delivery 2 starts once delivery 1 has done its one step,
// and takes its own step next (order 1,2): past the order, a later
// delivery waits for the earliest one to ask.
func TestPanicStopsTheOtherDeliveries(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var firsts atomic.Int32
	job := harness.Job{Name: "panics-beside-a-deaf-one", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if _, err := d.DB.Exec(ctx, `UPDATE users SET is_email_verified = true WHERE id = 1`); err != nil {
			return err
		}
		switch {
		case d.Attempt == 2:
			panic("nil map")
		case d.Attempt == 1 && firsts.Add(1) > 2: // the two clean runs come first
			<-release // deaf to ctx
		}
		return nil
	}}
	res := replay(t, job, "j1a1w1 > j1a2w2@1:1 order 1,2", func(c *harness.Config) {
		c.Setup = []harness.Setup{harness.SQL(usersSchema)}
		c.DeliveryTimeout = time.Hour
	})
	sc := res.Scenarios[0]
	assert.Equal(t, result.NotIdempotent, sc.Verdict, "%+v", sc.Problems)
	require.Len(t, sc.Deliveries, 2, "%+v", sc.Deliveries)
	assert.True(t, sc.Deliveries[0].Died, "the deaf delivery is dead: %+v", sc.Deliveries[0])
	assert.Equal(t, "stopped by the scenario: delivery j1a2w2 panicked, which settles its outcome", sc.Deliveries[0].Fault)
	require.NotEmpty(t, sc.Problems)
	assert.Contains(t, sc.Problems[0].Detail, "delivery j1a2w2 (attempt 2) of schedule j1a1w1 > j1a2w2@1:1 order 1,2 (replay) panicked, so the scenario stopped there")
}
