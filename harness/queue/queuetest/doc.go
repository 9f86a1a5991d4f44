// Package queuetest is the conformance suite every queue adapter runs: one
// call, Run, checks that a harness.Job carrying the adapter's queue.Queue
// keeps the promises package queue documents, as River's riverdrivertest
// holds each of River's drivers to one suite. Bench measures what the
// queue's bookkeeping costs a check.
//
// The suite drives the queue through harness.Run, not through the Queue's
// methods one by one: an adapter's ack may be the handler's own commit
// (gue, watermill-sql) or the real library's consumer loop (asynq, NATS,
// Kafka), so the queue is only whole together with the handler the
// adapter wraps around the production code. The adapter says how it wraps
// a plain harness.Handler (NewJob); the suite's handlers write to tables
// of its own, and every scenario gets a fresh database from the harness
// (TWICE_POSTGRES and TWICE_DATABASE_URL choose the server, as for any
// check).
//
// # The rules
//
// Each rule is a subtest of Run:
//
//   - schema: the job needs no setup of the queue's; the queue's own
//     tables are left out of the comparison, and its job table holds no
//     row of the job's.
//   - ack-completes: an acked job is never handed out again, and the
//     queue holds it done (queue.Fetched.Done).
//   - crash-redelivers: a job whose worker died before one of its steps
//     (each in turn) is handed out again under the same job ID, with a
//     higher attempt, and a write made before the crash is made again.
//   - withheld-ack: a job whose handler returned nil but whose ack never
//     arrived (its worker died, the ack was lost) is handed out again;
//     with AckedByCommit the handler's own commit completed it.
//   - failure-retries: a handler's error is a nack, and the queue hands
//     the job out again with a higher attempt until it succeeds. (The
//     failure is a redelivery's, after a crash: a clean run must not
//     fail.)
//   - producer-copy: a producer's copy is a job of its own (a new job ID,
//     attempt 1) that runs unless the queue dedups (queue.Rules.Dedup).
//   - fresh-storage: every scenario starts on fresh storage: its first
//     delivery is handed out as attempt 1, whatever the scenarios before
//     it left.
//   - check-and-explore: harness.Check and harness.Explore pass for an
//     idempotent handler.
//
// Options state the differences a queue has by design; AckedByCommit is
// the one there is. A job on queue.Model, the harness's own model, keeps
// no state: it is held to handing an acked job out again instead of
// ack-completes.
//
// # Using it
//
// In the adapter's tests:
//
//	func TestQueueConformance(t *testing.T) {
//		queuetest.Run(t, func(name string, h harness.Handler) harness.Job {
//			return twicegue.Job(name, twicegue.Spec[struct{}]{Type: name},
//				func(d *harness.Delivery) gue.WorkFunc {
//					return func(ctx context.Context, _ *gue.Job) error { return h(ctx, d) }
//				})
//		}, queuetest.AckedByCommit()) // gue's ack is the WorkFunc's commit
//	}
//
// and BenchmarkCheck calls Bench with the same NewJob.
package queuetest
