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
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
)

// A job its producer scheduled for later (asynq's ProcessIn(10s)) is run
// where it is due: the harness clock moves to the due time the queue
// names, the clean run's delivery that ran the handler is the plan, and
// the faults act on its steps. Before, the first delivery was an empty
// poll, the plan had no steps, and no crash scenario was made.
func TestScheduledJobRunsWhenDue(t *testing.T) {
	var mu sync.Mutex // scenarios run in parallel
	var now []time.Time
	job := harness.Job{Name: "scheduled-add", Queue: tableQueue{redeliver: time.Hour, holdRunning: true, runIn: 10 * time.Second, answerDue: true},
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			mu.Lock()
			now = append(now, d.Now())
			mu.Unlock()
			_, err := d.DB.Exec(ctx, `UPDATE rewards SET points = points + 50 WHERE order_id = 1`)
			return err
		}}
	res := runQueue(t, job, queueConfig(faults.CrashAtEveryStep(), faults.CrashBeforeAck()))
	require.Len(t, res.Steps, 1, "the plan is the delivery that ran the handler, not the poll before it was due")
	mu.Lock()
	require.NotEmpty(t, now)
	first := now[0]
	mu.Unlock()
	start := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC) // Config.ClockStart's zero
	assert.Equal(t, start.Add(10*time.Second), first.UTC(), "the clean run's handler runs at the due time")
	assert.False(t, res.Idempotent(), "adding points on every run is found once the job runs: %s", res)
	var crashed int
	for _, s := range res.Scenarios {
		if s.Fault == faults.NameCrashBeforeAck {
			crashed++
			require.NotEmpty(t, s.Deliveries)
			first := s.Deliveries[0]
			assert.Empty(t, first.NotDelivered)
			assert.Equal(t, 10*time.Second, first.Waited, "the first delivery waited for the due time")
			assert.True(t, first.Died)
		}
	}
	assert.Equal(t, 1, crashed)
}

// A check whose clean run never ran the handler is the user's error that
// says why, never a pass: here a queue whose job is never due.
func TestScheduledJobNeverDueIsAnError(t *testing.T) {
	job := harness.Job{Name: "never-due", Queue: tableQueue{redeliver: time.Hour, postpone: true},
		Handler: exec(`UPDATE rewards SET points = 50 WHERE order_id = 1`)}
	_, err := harness.Run(t.Context(), job, queueConfig(faults.RunTwice()))
	require.Error(t, err)
	assert.True(t, blame.IsUser(err), "the job's queue, not twice: %v", err)
	assert.Contains(t, err.Error(), `job "never-due": its clean reference run 1 never ran the handler`)
	assert.Contains(t, err.Error(), "the job is scheduled for +")
	assert.Contains(t, err.Error(), "and was never due: postponed to")
}

// A queue that says only that the job is not due yet, without DueAt, is
// handed the job by its own later rounds; the plan is still the delivery
// that ran the handler, so its steps are checked.
func TestScheduledJobWithoutDueAtPlansFromTheDeliveryThatRan(t *testing.T) {
	job := harness.Job{Name: "scheduled-quiet", Queue: tableQueue{redeliver: time.Hour, holdRunning: true, runIn: 10 * time.Second},
		Handler: exec(`UPDATE rewards SET points = 50 WHERE order_id = 1`)}
	res := runQueue(t, job, queueConfig(faults.RunTwice()))
	assert.Len(t, res.Steps, 1, "the plan is the queue's later round that ran the handler")
	assert.Equal(t, result.OutcomeIdempotent, res.Outcome)
}
