package queue

import "time"

// Rules are a queue's timing and its own tables. They are the only place a
// check's queue timing is stated: a job without a queue has Model's.
type Rules struct {
	// Redeliver is how long after a delivery started, on the harness
	// clock, the queue hands out again a job that was not acked (River:
	// its rescuer's RescueStuckJobsAfter, 1h by default; SQS: the
	// visibility timeout). Zero means faults.DefaultVisibilityTimeout (30s).
	Redeliver time.Duration
	// CancelAfter is how long after a delivery started, on the harness
	// clock, the queue cancels its context (River: the worker's timeout,
	// 1 min by default); zero never cancels. When a later delivery starts
	// past that point, the earlier delivery's context is cancelled first
	// and the later one starts once the earlier has returned or taken
	// another step (or after 2s), so a handler that honours its context
	// is judged as it runs under the queue. The context is cancelled
	// where the handler waits on the harness: a step held for its turn,
	// or one waiting on a lock.
	CancelAfter time.Duration
	// Dedup is how long the queue refuses a producer copy of a job it
	// holds, counted from the original's enqueue on the harness clock
	// (asynq: Unique's TTL; River: UniqueOpts.ByPeriod); a negative Dedup
	// means for as long as the original is held in the states the queue
	// dedups on (a TaskID, River's unique states). Zero means the queue
	// refuses no copy. A queue that dedups gets late producer copies in
	// the default matrix: one after the original completed, and one past
	// Dedup when it is positive.
	Dedup time.Duration
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
	// one at a time, whatever the harness's parallelism says. It is for a
	// queue that sees the transactions of every database on the server:
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
	// (Result.Reductions). False tries every order.
	OneDeliveryAtATime bool
	// HandlerSettles says the handler settles its delivery with the
	// queue itself, outside the schedule (Kafka: a handler that commits
	// its record's offset, twicekafka.CommitInHandler), so what the
	// queue's Fetch, Ack or Nack reads may hang on whether another
	// delivery's running handler has settled yet. The executor cannot
	// order that settling against its own operations, so an operation
	// made while another delivery's handler runs is recorded as a race
	// (result.SettledBeside): a scenario that passed with one is run
	// again, and one whose runs differ is Flaky, not a pass.
	HandlerSettles bool
}
