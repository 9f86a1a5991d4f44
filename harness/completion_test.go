package harness_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// When two deliveries of a job overlap, the one the queue handed out last
// decides whether the job completed, whatever the other returned: SQS's
// rule, where only the latest receipt handle acks.
func TestCompletionRuleForOverlappingDeliveries(t *testing.T) {
	// The second delivery starts after the first's step 1 and runs whole
	// (it finishes first), then the first goes on to its end.
	const overlap = "j1a1w1 > +30s j1a2w2@1:1 order 1,2,2,1"
	tests := []struct {
		name      string
		fails     func(call int, d *harness.Delivery) bool
		wantRetry bool
	}{
		{
			// Calls 1 and 2 are the clean references; call 3 is the
			// scenario's first delivery.
			name:  "the earlier delivery fails, the later succeeds: the job is done",
			fails: func(call int, _ *harness.Delivery) bool { return call == 3 },
		},
		{
			name:      "the earlier delivery succeeds, the later fails: the queue retries the job",
			fails:     func(_ int, d *harness.Delivery) bool { return d.Attempt == 2 },
			wantRetry: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int32
			job := harness.Job{Name: "overlap", Handler: func(ctx context.Context, d *harness.Delivery) error {
				call := int(calls.Add(1))
				for _, sql := range []string{`UPDATE items SET note = 'done' WHERE id = 1`, `SELECT 1`} {
					if _, err := d.DB.Exec(ctx, sql); err != nil {
						return err
					}
				}
				if tt.fails(call, d) {
					return errors.New("the provider said no")
				}
				return nil
			}}
			sc := replay(t, job, overlap).Scenarios[0]
			require.GreaterOrEqual(t, len(sc.Deliveries), 2)
			require.GreaterOrEqual(t, len(sc.Order), 4)
			assert.Equal(t, []int{1, 2, 2, 1}, sc.Order[:4], "the deliveries overlapped: order %v", sc.Order)
			for _, p := range sc.Problems {
				assert.NotEqual(t, result.DidNotComplete, p.Kind, "the queue's retry completed it")
			}
			if !tt.wantRetry {
				assert.Len(t, sc.Deliveries, 2, "no retry: the later delivery's success completed the job")
				assert.NotEmpty(t, sc.Deliveries[0].Err)
				assert.Equal(t, result.Idempotent, sc.Verdict)
				return
			}
			require.Len(t, sc.Deliveries, 3, "the later delivery's failure makes the queue retry")
			assert.Empty(t, sc.Deliveries[0].Err)
			assert.NotEmpty(t, sc.Deliveries[1].Err)
			assert.True(t, sc.Deliveries[2].QueueRetry)
			assert.Empty(t, sc.Deliveries[2].Err, "attempt 3 succeeds")
		})
	}
}
