package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Queue is a job queue's own bookkeeping: what the scenario's database
// needs for it, putting the job in the queue, handing it out, and
// recording how a delivery ended. A queue adapter implements it, so that
// its bookkeeping is the queue's and not the handler's steps: the harness
// runs every operation on its own connection to the scenario's database,
// outside the wire proxy, one at a time and in the executor's order, so
// none of them is a fault point, and a fault that withholds the ack
// (crash-before-ack, lost-ack) withholds the queue's Ack.
//
// The methods must not keep the connection or anything made from it; an
// error ends the scenario as an internal error naming the operation. A
// later scenario on the same database may get the same connection (the
// harness keeps it across the database's reset, warm, with its prepared
// statements), so state keyed by it must not outlive the execution.
type Queue interface {
	// Schema is what the scenario's database needs for the queue before
	// the job's own setup runs (River's tables, gue_jobs). The harness
	// applies it first, in the template every scenario is cloned from,
	// so a job carrying its queue needs nothing else in Config.Setup.
	// A queue that keeps nothing in PostgreSQL returns the zero Schema.
	Schema() Schema
	// Enqueue puts one job into the queue, as the producer does, before
	// any delivery: the original job (op.Job 1), then each producer
	// copy, in order. A late copy (faults.Scheduled.Late: after the
	// original completed, or past Rules.Dedup) is enqueued only when its
	// delivery starts, at op.Now on the harness clock, while other
	// deliveries may still run. A queue that refuses a copy as a
	// duplicate (a unique job, a task ID) says so, and the copy is never
	// delivered. Every scenario and clean run starts with Enqueue of job
	// 1 on a fresh database: a queue whose storage is elsewhere starts
	// afresh there too.
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

// Schema is what a queue needs in the scenario's database: its tables,
// types and functions, made before the job's own setup. The harness
// applies SQL, then Apply, once per template database; the zero Schema
// needs nothing.
type Schema struct {
	// Name says whose schema it is in errors ("River's migrations") and,
	// with Apply, keys the template database: the harness reuses a
	// template built by an Apply of the same Name within one test binary,
	// so two schemas an Apply builds differently (a topic's tables) must
	// have different Names. Required with Apply.
	Name string
	// SQL is applied as given; it may hold many statements.
	SQL string
	// Apply builds what SQL cannot (a migrator written in Go), on the
	// harness's own connection to the template database. Its ctx ends at
	// the setup deadline (harness.Config.SetupTimeout).
	Apply func(ctx context.Context, conn *pgx.Conn) error
}

// IsZero reports whether s needs nothing.
func (s Schema) IsZero() bool { return s.SQL == "" && s.Apply == nil }

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
	Kind DeliveryKind
	// Queued is what Fetch returned as Fetched.Job for this delivery; set
	// in Ack and Nack.
	Queued any
}

// Enqueued is the answer to Enqueue.
type Enqueued struct {
	// JobID is the queue's ID for the job: the delivery's Delivery.JobID.
	JobID string
	// Duplicate means the queue refused the job as a copy of one it
	// holds.
	Duplicate bool
	// Reason says which rule refused a Duplicate ("River's UniqueOpts
	// matched job 1").
	Reason string
}

// Fetched is the answer to Fetch.
type Fetched struct {
	// Delivered is false when the queue did not hand the job out.
	Delivered bool
	// Reason says why a job was not Delivered ("the job is completed",
	// "attempt 1 still holds it").
	Reason string
	// Done, with Delivered false, says the queue considers the job
	// finished (completed or cancelled): no later delivery will be made.
	Done bool
	// Attempt is the queue's attempt counter for this delivery, from 1;
	// it becomes Delivery.Attempt. Zero keeps the harness's own count.
	Attempt int
	// Job is the queue's own record of the job as handed out (River: a
	// *rivertype.JobRow); the handler finds it in Delivery.Queued.
	Job any
	// DueAt, with Delivered false, says the job is scheduled and not yet
	// due (asynq's ProcessIn/ProcessAt, River's ScheduledAt or a snooze,
	// gue's RunAt): the queue hands it out at DueAt on the harness clock.
	// The harness moves its clock there and fetches again, so a scheduled
	// job is checked where it runs (result.DeliveryOutcome.Waited says
	// how far), at most 3 times per delivery; a DueAt not ahead of the
	// clock, or a fourth, leaves the delivery not delivered with "the job
	// is scheduled for +10s and was never due: " and Reason. Zero means
	// not scheduled: Reason alone, and the harness asks again only in the
	// queue's later rounds (after Rules.Redeliver).
	//
	// DueAt is only for a job that waits for its own time. A job another
	// delivery holds (a lease, an unacked message, a visibility timeout)
	// is not scheduled: leave DueAt zero and say so in Reason, or the
	// harness's clock move turns a concurrent delivery into a redelivery
	// after the lease.
	DueAt time.Time
}

// Settled is what the queue recorded for a delivery.
type Settled struct {
	// Outcome is how the delivery ended for the queue.
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

var settlementNames = [...]string{Completed: "completed", Retry: "retry", Snoozed: "snoozed", Cancelled: "cancelled", Discarded: "discarded"}

// String names the settlement as reports show it.
func (s Settlement) String() string {
	if s < Completed || int(s) >= len(settlementNames) {
		return fmt.Sprintf("Settlement(%d)", int(s))
	}
	return settlementNames[s]
}

// Finished reports whether the job needs no further delivery: it is
// completed, cancelled or discarded.
func (s Settlement) Finished() bool { return s == Completed || s == Cancelled || s == Discarded }

// Complete reports whether the job counts as done: completed, or given up
// by the handler on purpose (cancelled).
func (s Settlement) Complete() bool { return s == Completed || s == Cancelled }

// DeliveryKind is why the queue handed a job out.
type DeliveryKind string

// Kinds of delivery, as reports spell them.
const (
	// DeliveryFirst is the job's first delivery.
	DeliveryFirst DeliveryKind = "first"
	// DeliveryRedelivery hands the job out again because an earlier
	// delivery was not acked in time: its worker died, or it outlived the
	// queue's redelivery time (Rules.Redeliver).
	DeliveryRedelivery DeliveryKind = "redelivery"
	// DeliveryLostAckRedelivery hands the job out again because the ack
	// of a delivery that succeeded never reached the queue.
	DeliveryLostAckRedelivery DeliveryKind = "lost-ack-redelivery"
	// DeliveryProducerCopy is the first delivery of a copy the producer
	// enqueued again with the same arguments under a new job ID.
	DeliveryProducerCopy DeliveryKind = "producer-copy"
	// DeliveryRedrive is a person handing the job out again, long after
	// it died.
	DeliveryRedrive DeliveryKind = "redrive"
	// DeliveryRetry is the queue's own retry after a failure or a snooze.
	DeliveryRetry DeliveryKind = "queue-retry"
)
