package queue

import (
	"context"
	"fmt"
	"time"
)

// Model is the harness's own model of a queue, for a job whose queue has no
// adapter: every delivery is handed out, a success is acked, and a job that
// was not acked (its worker died, its handler failed) is handed out again
// once VisibilityTimeout has passed on the harness clock. A Job whose Queue
// is nil is checked as under Model{}; set Job.Queue to a Model to change
// its timing:
//
//	harness.Job{Name: "reward-order", Handler: reward,
//		Queue: queue.Model{VisibilityTimeout: 5 * time.Minute, CancelAtVisibilityTimeout: true}}
//
// The harness runs a Model itself, with no connection of its own; its
// methods are the same model through the Queue interface.
type Model struct {
	// VisibilityTimeout is how long after a delivery started a job it did
	// not ack is handed out again. Zero means
	// faults.DefaultVisibilityTimeout (30s).
	VisibilityTimeout time.Duration
	// CancelAtVisibilityTimeout cancels a delivery's context once the
	// visibility timeout has passed while it still runs, before the job
	// is handed out again, as asynq and River cancel a job at its
	// deadline: a handler that honours its context then stops where it
	// would in production (its open transaction rolls back), and one
	// that ignores it goes on beside the redelivery. Off, the
	// visibility-timeout fault lets the first delivery run on, as a
	// queue without deadlines does. See Rules.CancelAfter.
	CancelAtVisibilityTimeout bool
}

// Schema is the zero Schema: the model keeps nothing in the database.
func (Model) Schema() Schema { return Schema{} }

// Enqueue gives job op.Job the ID the harness gives it ("twice-job-1");
// the model refuses no copy.
func (Model) Enqueue(_ context.Context, op Op) (Enqueued, error) {
	return Enqueued{JobID: fmt.Sprintf("twice-job-%d", op.Job)}, nil
}

// Fetch hands every delivery out, counting attempts as the harness does.
func (Model) Fetch(context.Context, Op) (Fetched, error) {
	return Fetched{Delivered: true}, nil
}

// Ack completes the job.
func (Model) Ack(context.Context, Op) (Settled, error) {
	return Settled{Outcome: Completed}, nil
}

// Nack hands the job out again after the visibility timeout.
func (m Model) Nack(context.Context, Op, error) (Settled, error) {
	return Settled{Outcome: Retry, After: m.Rules().Redeliver}, nil
}

// Rules are the model's timing; it has no tables.
func (m Model) Rules() Rules {
	r := Rules{Redeliver: m.VisibilityTimeout}
	if r.Redeliver <= 0 {
		r.Redeliver = defaultVisibilityTimeout
	}
	if m.CancelAtVisibilityTimeout {
		r.CancelAfter = r.Redeliver
	}
	return r
}

// defaultVisibilityTimeout is faults.DefaultVisibilityTimeout, which this
// package does not import: a queue adapter depends on nothing of twice's
// but this package. A test holds the two equal.
const defaultVisibilityTimeout = 30 * time.Second
