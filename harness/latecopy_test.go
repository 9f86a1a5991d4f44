package harness_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/harness/result"
)

// uniqueQueue is tableQueue with a unique rule on the job's arguments
// (every copy has the same): it refuses a producer's copy while the
// original is unfinished (asynq's Unique, whose lock a success releases),
// while the original is held at all (keepDone: a task ID kept after
// completion), or within window of the original's enqueue (a TTL).
type uniqueQueue struct {
	tableQueue
	keepDone bool
	window   time.Duration
}

func (q uniqueQueue) Enqueue(ctx context.Context, op queue.Op) (queue.Enqueued, error) {
	if op.Job > 1 {
		cond, args := `state <> 'done'`, []any{}
		switch {
		case q.window > 0:
			cond, args = `run_at > $1::timestamptz - $2::interval`, []any{op.Now, q.window}
		case q.keepDone:
			cond = `true`
		}
		var held bool
		if err := op.Conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM queue_jobs WHERE `+cond+`)`, args...).Scan(&held); err != nil {
			return queue.Enqueued{}, err
		}
		if held {
			return queue.Enqueued{Duplicate: true, Reason: "the unique key is held"}, nil
		}
	}
	return q.tableQueue.Enqueue(ctx, op)
}

func (q uniqueQueue) Rules() queue.Rules {
	r := q.tableQueue.Rules()
	r.Dedup = -1
	if q.window > 0 {
		r.Dedup = q.window
	}
	return r
}

func verdicts(res *harness.Result) map[faults.Name]result.Verdict {
	out := map[faults.Name]result.Verdict{}
	for _, s := range res.Scenarios {
		if out[s.Fault] != result.NotIdempotent {
			out[s.Fault] = s.Verdict
		}
	}
	return out
}

// A unique rule that lets go of its key once the original completed
// refuses the producer's copy enqueued with it, and hands out one that
// comes after: the late copy finds the handler that adds points again.
// One that keeps the key after completion refuses both.
func TestLateProducerCopy(t *testing.T) {
	add := exec(`UPDATE rewards SET points = points + 50 WHERE order_id = 1`)
	base := tableQueue{redeliver: time.Hour, holdRunning: true}
	tests := []struct {
		name string
		q    uniqueQueue
		want result.Verdict
	}{
		{"released on completion", uniqueQueue{tableQueue: base}, result.NotIdempotent},
		{"kept after completion", uniqueQueue{tableQueue: base, keepDone: true}, result.Idempotent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job := harness.Job{Name: "add-points", Queue: tt.q, Handler: add}
			res := runQueue(t, job, queueConfig(faults.ProducerRetry(), faults.LateProducerRetry()))
			got := verdicts(res)
			assert.Equal(t, result.Idempotent, got[faults.NameProducerRetry], "the copy enqueued with the original is refused: %s", res)
			assert.Equal(t, tt.want, got[faults.NameLateProducerRetry], "%s", res)
			for _, s := range res.Scenarios {
				if s.Fault != faults.NameLateProducerRetry {
					continue
				}
				assert.Equal(t, "j1a1w1 > +5s late j2a1w2", s.Schedule.String(), "after the producer's 5s timeout")
				require.Len(t, s.Deliveries, 2)
				late := s.Deliveries[1]
				assert.True(t, late.Delivery.Late)
				if tt.want == result.Idempotent {
					assert.Contains(t, late.NotDelivered, "duplicate: the unique key is held")
				} else {
					assert.Empty(t, late.NotDelivered)
					assert.Equal(t, queue.DeliveryProducerCopy, late.Kind)
				}
			}
		})
	}
}

// A unique rule with a window refuses a late copy within it and hands
// out the one past it.
func TestProducerCopyAfterDedupWindow(t *testing.T) {
	q := uniqueQueue{tableQueue: tableQueue{redeliver: time.Hour, holdRunning: true}, window: time.Hour}
	job := harness.Job{Name: "add-points", Queue: q, Handler: exec(`UPDATE rewards SET points = points + 50 WHERE order_id = 1`)}
	res := runQueue(t, job, queueConfig(faults.LateProducerRetry(), faults.ProducerRetryAfterDedup()))
	got := verdicts(res)
	assert.Equal(t, result.Idempotent, got[faults.NameLateProducerRetry], "within the window: %s", res)
	assert.Equal(t, result.NotIdempotent, got[faults.NameProducerRetryAfterDedup], "past the window: %s", res)
	for _, s := range res.Scenarios {
		if s.Fault == faults.NameProducerRetryAfterDedup {
			assert.Equal(t, "j1a1w1 > +3601s late j2a1w2", s.Schedule.String())
		}
	}
}

// The default matrix holds a late copy for a queue that dedups, and none
// for one that does not (queue.Model's, a queue with Dedup zero).
func TestDefaultMatrixHasLateCopyWhereTheQueueDedups(t *testing.T) {
	set := exec(`UPDATE rewards SET points = 50 WHERE order_id = 1`)
	has := func(res *harness.Result, name faults.Name) bool {
		for _, s := range res.Scenarios {
			if s.Fault == name {
				return true
			}
		}
		return false
	}
	base := tableQueue{redeliver: time.Hour, holdRunning: true}
	for _, tt := range []struct {
		name        string
		q           queue.Queue
		late, after bool
	}{
		{"no dedup", base, false, false},
		{"dedup while held", uniqueQueue{tableQueue: base}, true, false},
		{"dedup window", uniqueQueue{tableQueue: base, window: time.Hour}, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := runQueue(t, harness.Job{Name: "set-points", Queue: tt.q, Handler: set}, queueConfig())
			assert.True(t, res.Idempotent(), "%s", res)
			assert.Equal(t, tt.late, has(res, faults.NameLateProducerRetry))
			assert.Equal(t, tt.after, has(res, faults.NameProducerRetryAfterDedup))
		})
	}
	res := runQueue(t, harness.Job{Name: "set-points", Handler: set}, queueConfig())
	assert.False(t, has(res, faults.NameLateProducerRetry), "queue.Model dedups nothing")
	assert.False(t, strings.Contains(res.String(), "late j2"))
}
