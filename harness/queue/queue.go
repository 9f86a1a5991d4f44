// Package queue is the seam between the harness and a job queue: the
// Queue interface an adapter (adapters/river) implements, and the values
// its operations take and answer. A Job without a Queue is delivered by
// the harness's own model of a queue.
package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/harness/result"
)

// Queue is a job queue's own bookkeeping: putting the job in the queue,
// handing it out, and recording how a delivery ended. A queue adapter
// (adapters/river) implements it, so that its bookkeeping is the queue's
// and not the handler's steps: the harness runs every operation on its
// own connection to the scenario's database, outside the wire proxy, one
// at a time and in the executor's order, so none of them is a fault
// point, and a fault that withholds the ack (crash-before-ack, lost-ack)
// withholds the queue's Ack.
//
// A Job without a Queue is delivered by the harness's own model of a
// queue: every delivery is handed out, a success is acked, and a failure
// is retried after Config.VisibilityTimeout.
//
// The methods must not keep the connection or anything made from it; an
// error ends the scenario as an internal error naming the operation.
type Queue interface {
	// Enqueue puts one job into the queue, as the producer does, before
	// any delivery: the original job (op.Job 1), then each producer
	// copy, in order. A queue that refuses a copy as a duplicate (a
	// unique job, a task ID) says so, and the copy is never delivered.
	Enqueue(ctx context.Context, op Op) (Enqueued, error)
	// Fetch hands the job out for one delivery of kind op.Kind, or says
	// why it would not: the job is already completed, another attempt
	// still holds it, it was deleted.
	Fetch(ctx context.Context, op Op) (Fetched, error)
	// Ack records a delivery whose handler returned nil.
	Ack(ctx context.Context, op Op) (Settled, error)
	// Nack records a delivery whose handler returned err: a retry, a
	// snooze, a cancellation, as the queue reads err.
	Nack(ctx context.Context, op Op, err error) (Settled, error)
	// Rules says when the queue hands out a job that was not acked, when
	// it cancels a delivery, and which tables and rows are its own.
	Rules() Rules
}

// Op is what a Queue operation works on.
type Op struct {
	// Conn is the harness's own connection to the scenario's database.
	// Statements on it are not steps and take no faults.
	Conn *pgx.Conn
	// Now is the harness clock's time: use it wherever the queue would
	// read its own clock.
	Now time.Time
	// Job numbers the job: 1 is the original, 2 and up are producer
	// copies of it (same arguments, new ID).
	Job int
	// JobID is the ID Enqueue returned; empty in Enqueue.
	JobID string
	// Kind is why the job is handed out; set in Fetch, Ack and Nack.
	Kind result.DeliveryKind
	// Queued is what Fetch returned as Fetched.Job for this delivery; set
	// in Ack and Nack.
	Queued any
}

// Enqueued is the answer to Enqueue.
type Enqueued struct {
	// JobID is the queue's ID for the job: the delivery's Delivery.JobID.
	JobID string
	// Duplicate means the queue refused the job as a copy of one it
	// holds; Reason says which rule refused it.
	Duplicate bool
	Reason    string
}

// Fetched is the answer to Fetch.
type Fetched struct {
	// Delivered is false when the queue did not hand the job out; Reason
	// then says why ("the job is completed", "attempt 1 still holds it").
	Delivered bool
	Reason    string
	// Done, with Delivered false, says the queue considers the job
	// finished (completed or cancelled): no later delivery will be made.
	Done bool
	// Attempt is the queue's attempt counter for this delivery, from 1;
	// it becomes Delivery.Attempt.
	Attempt int
	// Job is the queue's own record of the job as handed out (River: a
	// *rivertype.JobRow); the handler finds it in Delivery.Queued.
	Job any
}

// Settled is what the queue recorded for a delivery.
type Settled struct {
	Outcome Settlement
	// After is when the queue hands the job out again, for Retry and
	// Snoozed: the harness clock moves this far before that delivery.
	After time.Duration
	// Detail is shown in reports: "retry in 1s (attempt 1 of 25)".
	Detail string
}

// Settlement is how a delivery ended for the queue.
type Settlement int

// Settlements.
const (
	// Completed: the job is done.
	Completed Settlement = iota + 1
	// Retry: the delivery failed; the queue hands the job out again.
	Retry
	// Snoozed: the handler asked to run again later; not a failure.
	Snoozed
	// Cancelled: the handler gave the job up on purpose; it is finished
	// and never handed out again.
	Cancelled
	// Discarded: the job failed too often; the queue gave up on it.
	Discarded
)

// String names the settlement as reports show it.
func (s Settlement) String() string {
	switch s {
	case Completed:
		return "completed"
	case Retry:
		return "retry"
	case Snoozed:
		return "snoozed"
	case Cancelled:
		return "cancelled"
	case Discarded:
		return "discarded"
	}
	return fmt.Sprintf("Settlement(%d)", int(s))
}

// Finished reports whether the job needs no further delivery.
func (s Settlement) Finished() bool { return s == Completed || s == Cancelled || s == Discarded }

// Complete reports whether the job counts as done: completed, or given
// up by the handler on purpose.
func (s Settlement) Complete() bool { return s == Completed || s == Cancelled }

// Rules are a queue's timing and its own tables.
type Rules struct {
	// Redeliver is how long after a delivery started, on the harness
	// clock, the queue hands out again a job that was not acked (River:
	// its rescuer's RescueStuckJobsAfter, 1h by default). It replaces
	// Config.VisibilityTimeout for the job; zero keeps that.
	Redeliver time.Duration
	// CancelAfter is how long after a delivery started, on the harness
	// clock, the queue cancels its context (River: the worker's timeout,
	// 1 min by default); zero never cancels. When a later delivery starts
	// past that point, the earlier delivery's context is cancelled first
	// and the later one starts once the earlier has returned or taken
	// another step, so a handler that honours its context is judged as it
	// runs under the queue.
	CancelAfter time.Duration
	// Tables are the queue's bookkeeping tables, left out of the
	// comparison ("river_migration", "river_leader").
	Tables []string
	// JobTable and JobIDColumn name the table holding one row per job and
	// the column holding Enqueued.JobID. The rows of the jobs the harness
	// enqueued are the queue's and are left out of the comparison, before
	// sequence values are ranked; rows the handler inserts there (child
	// jobs) are compared.
	JobTable, JobIDColumn string
	// OneScenarioAtATime runs the job's scenarios and its two clean runs
	// one at a time, whatever -twice.parallel says. It is for a queue
	// that sees the transactions of every database on the server:
	// watermill-sql hands out only messages older than every transaction
	// open on it (pg_snapshot_xmin), so a scenario running beside another
	// would not see its own message while the other's transaction is open.
	OneScenarioAtATime bool
	// OneDeliveryAtATime says Fetch never hands out a job that another
	// delivery holds (River: a running job, until its rescuer; asynq: an
	// active task, while its lease holds): it refuses it until that
	// delivery has been settled or Redeliver has passed. The second
	// delivery of concurrent-delivery, which starts beside the first on
	// an unmoved clock, is then never handed out, whatever the order of
	// their steps, so the check runs one order of it instead of every
	// one. If the queue hands that delivery out all the same, the check
	// runs the orders it left out as well, so the verdict is never weaker
	// (Result.Reductions). Zero tries every order.
	OneDeliveryAtATime bool
}
