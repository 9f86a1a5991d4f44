// Package harness checks that a background-job handler is idempotent: that
// running it twice has the same effect as running it once.
//
// # How a check runs
//
// The harness gets a real PostgreSQL server (see "Getting PostgreSQL"),
// builds a template database from the job's Setup once, and gives every
// scenario an identical fresh database. It runs the job once, cleanly, on
// two fresh databases: the first is the reference state and its steps are
// the fault points; columns that differ between the two (now(), random
// UUIDs) are volatile and left out of every comparison. Then it executes
// every schedule of the configured faults (faults.Default: run twice,
// producer retry, crash before ack, lost ack, crash at every step,
// ambiguous commit at every commit point, a lost answer and a refusal at
// every effect call, visibility timeout at every step,
// concurrent delivery and producer retry over their interleavings, redrive
// after the providers' key window, and for a queue that dedups producer
// copies a copy enqueued late, after the original completed and past the
// dedup window) on a fresh database of its own,
// snapshots every user table and compares the rows with the reference
// using go-cmp. Values drawn from sequences, and the foreign keys that point
// at them, are compared after canonical renumbering, because a rolled-back
// attempt burns sequence values.
//
// A scenario is not idempotent when its state or its effects differ from
// the reference, or when the job cannot complete: after the schedule the
// queue redelivers, once (a queue adapter's queue: as its own retry rules
// say), every job whose last delivery failed, and that delivery must
// succeed. A retry that always fails is a finding too.
//
// When deliveries of one job overlap (a visibility timeout, a concurrent
// delivery), the one the queue handed out last decides whether the job
// completed, whatever the others returned and whichever finished first:
// if it succeeded the job is done, if it failed the queue retries it. That
// is SQS's rule, where only the latest receipt handle acks a message.
//
// A handler whose panic reaches the harness (one its queue adapter does
// not recover itself, as gue's, asynq's and Watermill's do) settles its
// scenario as a finding, whatever the queue's retry would have done: no
// retry runs, deliveries not yet handed out are not, and running ones die
// as at a crash, their backends terminated on the server.
//
// What a check learned is a value of package result (harness/result),
// documented there: the check's result.Status, each result.Scenario with
// its problems, diffs and deliveries, and for every step a delivery was
// granted the result.Fate the executor recorded where it happened. The
// twice runner reads the same values back from the files Check writes.
//
// # Steps and faults
//
// Every delivery reaches PostgreSQL through a wire-protocol proxy of its
// own, so any driver works (pgx, database/sql, lib/pq, ORMs on top). Each
// statement round trip that executes is a step, and so is each effect call;
// the harness holds every step until the schedule grants it, crashes the
// delivery before it, or lets the server apply it and drops the reply.
// Overlapping deliveries interleave step by step in the schedule's order;
// a granted statement that waits on a lock held by the other delivery is
// detected by asking the server (pg_blocking_pids), and the other delivery
// runs meanwhile. The concurrent faults run one order of each class of
// orders that differ only in when a delivery ran a free step (a BEGIN, a
// SET: faults.Free), judged from the clean run; when a delivery's own
// steps differ there, the orders left out run too (Result.Reductions).
// Likewise crash-mid-job and redrive crash once per class of crash
// points with no commit point or effect call between them
// (faults.CrashClass): inside one transaction they roll back to the same
// state. When the crashed delivery took other steps inside the class
// than the clean run, the other crash points run too. Visibility-timeout
// runs one pause of each run inside a transaction (faults.PauseClass),
// and the rest unless its second delivery waited on the first one's locks.
// They also overlap autocommit writes inside one statement: a place of
// the order marked held (faults.Schedule.Holds, "1~" in the text) runs
// its statement inside a transaction whose commit, and the handler's
// reply, wait until the other delivery's next step has run or waits on
// a lock, so both statements run on snapshots taken before either
// committed (INSERT ... WHERE NOT EXISTS inserts twice).
// A dead delivery's connections are cut and refused, its
// effects refused, its return value ignored and its worker discarded. It
// is not waited for: its context is cancelled and the scenario goes on at
// once, even while its goroutine still runs (a database client retrying
// with backoff, deaf to its context); nothing it does later is recorded,
// and a goroutine still running when the check ends is logged once. A
// delivery that returned leaves the server sessions of its idle
// connections, reset with DISCARD ALL (settings, prepared statements,
// temporary tables, advisory locks), to the scenario's later deliveries,
// which then connect without starting a server backend. So do a dead
// delivery's connections that were between round trips, and the
// connection an ambiguous step's lost reply cut (the server had
// answered): each session is first rolled back, as the server rolls
// back one whose client went away; one cut in the middle of a round
// trip is terminated. When the check ends, they wait, parked with their database
// (at most 32 sessions in a process), for the next check that gets the
// same database of the same template. After
// an ambiguous step only that step's connection is lost, as in a network
// failure: the delivery's error path runs, it may connect again and retry
// (pgx.BeginFunc in a loop, database/sql after driver.ErrBadConn), and its
// return value counts. An effect fault leaves the delivery alive: the
// provider makes the call and loses its answer, or refuses it with a 503,
// and the call returns an *effects.Error for the handler to handle.
//
// A commit point is a COMMIT, or a statement outside a transaction block
// that wrote. Most show in their text (INSERT, UPDATE through a view with
// a rule, CALL, DO, nextval); for a SELECT, VALUES, WITH, EXPLAIN or COPY
// TO, which may call a function that writes, the proxy asks the server in
// the statement's own transaction whether it was given a transaction ID,
// so SELECT credit(...) of a plpgsql function that inserts is a commit
// point and SELECT of a STABLE function is not.
//
// # Effects
//
// Work that leaves the database goes through the delivery's fakes
// (package effects), which record into one log per scenario:
// Delivery.Mail (no deduplication), Delivery.Payments (Stripe's
// idempotency keys, remembered for 24h on the harness clock unless
// Config.Providers says otherwise) and Delivery.Effect, which wraps a call
// to your own client. Each effect kind has a policy (Config.EffectPolicies):
// exactly-once by default, at-least-once for receipts, at-most-once, or
// repeatable for an effect harmless to repeat at the provider (cancelling
// a subscription: any number of copies is fine, none is not).
//
// # Writing a check
//
// Adapt the handler to a Job: each Delivery carries the job ID and attempt,
// connections of its own to the scenario's database (a pgx pool in DB, a
// *sql.DB from SQL for database/sql, sqlc, GORM, bun or ent, and a DSN any
// driver accepts), and the harness clock. The job's own code takes these
// as production passes them (a pool, a mailer interface, a func() time.Time)
// and never imports twice; the test wires the Delivery into them.
//
//	func TestRewardOrder(t *testing.T) {
//		harness.Check(t, harness.Job{
//			Name: "reward-order",
//			Handler: func(ctx context.Context, d *harness.Delivery) error {
//				return loyalty.RewardWithLedger(ctx, d.DB, 77, 9812)
//			},
//		}, harness.Config{Setup: []harness.Setup{harness.SQLFiles("schema.sql")}})
//	}
//
// When the handler keeps state in memory (a cache, an in-process dedup
// map), set Job.NewWorker instead of Job.Handler: a redelivery then runs on
// a freshly built worker, as after a real crash.
//
// The handler returns the error the queue would see. When the production
// worker's wrapper logs errors and returns nil, check it through that
// wrapper or an adapter closure that does the same (see Handler).
//
// A failed check prints one message: every scenario that differs, its
// schedule, the per-table diff (-once +twice), and the go test line that
// reruns it. Its databases are kept and logged; a passing check drops them.
// Mark a job known not to be idempotent with Config.ExpectFinding.
//
// # Queues
//
// A job is delivered by its queue (Job.Queue, a queue.Queue from package
// harness/queue): a queue adapter (adapters/river, adapters/gue,
// adapters/asynq, adapters/watermill) gives the harness the queue's own
// enqueue, fetch, ack and nack, run on the harness's connection outside the
// proxy, and the queue's schema, which the harness applies to the template
// database before Config.Setup, in Check, Run and Explore alike:
//
//	harness.Check(t, twiceriver.Job("reward-order", points.RewardArgs{OrderID: 9812}, newWorker),
//		harness.Config{Setup: []harness.Setup{harness.SQL(points.Schema)}})
//
// The queue's rules (queue.Rules) are the check's only queue timing: when a
// job that was not acked is handed out again, and when a running
// delivery's context is cancelled. A job without an adapter is delivered by
// the harness's own model, queue.Model: set Job.Queue to
// queue.Model{VisibilityTimeout: 5 * time.Minute} to change its
// visibility timeout (30s by default), and its CancelAtVisibilityTimeout to
// cancel a delivery's context at it.
//
// # Flags
//
// A test binary's -twice.* flags, each mirrored by a TWICE_* environment
// variable (the flag wins): -twice.replay runs exactly one schedule
// (ReplayEnv), -twice.checks and -twice.seed steer Explore (ChecksEnv,
// SeedEnv), -twice.keep=false drops a failed check's databases (KeepEnv),
// and -twice.shard=i/n runs shard i of n of every check's schedules, so CI
// machines split the checks between them (ShardEnv; twice report -merge
// joins their reports).
//
// # Getting PostgreSQL
//
// One server per test binary, shared by all its tests and stopped when the
// binary exits, found in this order (TWICE_POSTGRES=url|local|docker forces
// one):
//
//  1. TWICE_DATABASE_URL, a server you run (a CI service);
//  2. PostgreSQL server binaries on PATH or under /usr/lib/postgresql/*/bin:
//     a throwaway cluster in a temporary directory;
//  3. Docker through testcontainers-go, image TWICE_POSTGRES_IMAGE.
//
// The harness creates, changes and drops only databases whose names it
// generated; it never writes to any other database on the server.
//
// # Limits
//
// Run is safe to call from parallel tests; it runs -twice.parallel
// (ParallelEnv, GOMAXPROCS by default) scenarios at once. A handler must reach the database only through its
// Delivery (DB, SQL or DSN), must call external systems through the Delivery's
// fakes, must read the time from Delivery.Now where faults should move it,
// and must not keep connections past its return (they are closed). A
// read-looking statement whose function only calls pg_notify, or only
// nextval (which takes a transaction ID only when it writes ahead to the
// WAL, one call in 32), is not reliably a commit point; nextval and setval
// named in the statement itself always are.
package harness
