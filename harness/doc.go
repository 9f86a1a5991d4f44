// Package harness checks that a background-job handler is idempotent: that
// running it twice has the same effect as running it once.
//
// # What Check does
//
// Check runs the job once, cleanly, on a fresh PostgreSQL database built
// from Config.Setup: that run's tables and effects are the reference, and
// its steps (each statement that reaches the server, each effect call) are
// the places faults strike. Then it runs the job again under each fault
// of Config.Faults (faults.Default when nil: the same job ID again, a
// producer's copy, a crash before the ack, a lost ack, a crash before
// every step, a lost commit reply, a lost or refused effect call, a
// visibility timeout, two deliveries at once in every order that can
// differ, a redrive days later), each scenario on a fresh database of its
// own, and compares every table the scenario or the clean run wrote, and
// the effects, with the reference. A scenario that differs is a finding;
// so is a job that cannot complete: after the faults the queue redelivers
// a job whose last delivery failed, and that delivery must succeed.
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
// A delivery that dies (a crash, or abandoned at Config.DeliveryTimeout)
// is dead on the server before any later delivery starts: its backends
// are terminated, so its open transaction rolls back and its locks are
// released; its later statements and effect calls are refused and not
// recorded, and its worker is discarded. After a lost commit reply only
// that connection is lost: the handler's error path runs and may
// reconnect and retry. A panic that reaches the harness (one the queue
// adapter does not recover) settles its scenario as a finding.
//
// Run is the same check returning (*Result, error) instead of failing a
// test; Explore draws schedules of several faults at once with rapid and
// shrinks a failure to a minimal one (ExploreRun returns it). Explore
// draws its own schedules and refuses Config.Faults; bound what it draws
// with ExploreOptions.
//
// # The job
//
// A Job is a name and a Handler. The handler gets a Delivery: the job ID
// and attempt, the delivery's kind (first, redelivery, producer copy,
// redrive, ...), connections of its own to the scenario's database (DB, a
// pgx pool; SQL, a *sql.DB for database/sql, sqlc, GORM, bun or ent; DSN,
// a URL any driver accepts, for code that opens its own connections and
// closes them before it returns), the effect fakes and the harness clock
// (Now). The job's own code takes these as production passes them (a
// pool, a mailer interface, a func() time.Time) and never imports twice;
// the test wires the Delivery into them. examples/drivers checks one job
// through pgx, pgxpool, database/sql (pgx, lib/pq), GORM, bun and sqlc.
// GORM keeps the *gorm.Config it is given and writes its connection into
// it: give every gorm.Open a new one, or deliveries share connections.
//
// The handler returns the error the queue would see. When the production
// worker's wrapper logs errors and returns nil, check it through that
// wrapper (see Handler). When the worker keeps state in memory (a cache,
// an in-process dedup map), set Job.NewWorker instead of Job.Handler: a
// delivery a real crash would put on a new worker gets a freshly built one.
//
// # Config
//
// The zero Config checks an empty database under the default matrix. Its
// fields, each documented where declared:
//
//   - Setup: schema and fixtures, applied once into a template database
//     that every scenario's database is a copy of: SQL, SQLFiles,
//     Migrations (golang-migrate, goose, tern, dbmate, sql-migrate or plain
//     files), Func and FuncDB for Go code. SetupTimeout bounds each step.
//   - Faults: which faults to run (package faults).
//   - IgnoreTables, IgnoreColumns, CmpOptions, SequenceColumns: what the
//     state comparison leaves out or compares by rank.
//   - EffectPolicies, IgnoreEffectFields, Providers: how effects are
//     judged and how the fake providers behave (package effects).
//   - ClockStart, DeliveryTimeout: the harness clock's start and how long
//     a delivery may run.
//   - ExpectFinding, ExpectPattern: a job known not to be idempotent
//     passes while twice still finds the problem (showing the pattern
//     ExpectPattern names), and fails once it is fixed.
//   - ExpectNoWork, AcceptWarnings: a job that rightly does nothing on
//     its fixture, and the warnings a pass may carry (see below).
//
// # A pass must be backed by what the job did
//
// The template keeps a write history: a row-level trigger on every table
// notes each row a committed INSERT, UPDATE, DELETE, COPY, MERGE or
// TRUNCATE wrote,
// by the handler's statements or by the triggers, functions and cascades
// they set off, with its old and new image (the queue's own bookkeeping,
// on its own connection, is left out). A check whose clean run wrote no
// row and made no effect, and in which every scenario passed, proves
// nothing (every fault left the same nothing behind) and fails as the
// user's error: "this check proves nothing", naming the statements that
// changed no row. Give Setup the rows the job works on, or set
// Config.ExpectNoWork to why the job rightly does nothing there. Without
// a superuser (a server URL whose user is not one) there is no history
// and no such check.
//
// The comparison follows the rows a job touched, not its tables' size: a
// table of 1 MiB or more with a primary key is read through the history,
// only the rows under a key some run wrote (and the fixture's rows under
// those keys, from the history's old images), and a database is reset by
// putting those rows back. A diff of such a table shows only rows a run
// wrote, and a kept database's dump leaves its rows out (the dumped
// twice.history holds those written). Smaller tables, tables without a
// primary key and every table after DDL are read whole.
//
// The history also says who wrote each row: the client statement that
// wrote it (its start and text), which the executor matches to the
// delivery and step that ran it. A finding names its culprits
// (result.Culprit): in each table that differs, the writes of a statement
// past the number the clean run makes of it (first those of rows the
// clean run did not write), the clean run's writes the scenario never
// made, and the effects beyond or missing, each with its delivery and
// step and the pattern it shows (result.Pattern), decided from the
// history, the effects' keys and the schedule: an increment without a
// record, an insert without a unique key, a check-then-act race, a record
// keyed per enqueue, an effect without a record, a key per attempt, a key
// or dedup window passed, an effect or work lost, the ack before the work, a
// retry that changed a stored result; none when nothing fits. Each
// finding has a result.Severity.
//
// A check that would pass with a warning saying the pass may be wrong
// fails instead, with the warning and the line that accepts it
// (Config.AcceptWarnings): result.NoStepTaken, a delivery on a fresh
// worker that took no step though the clean run did, because it worked
// through a pool of its own or skipped on what it kept in memory (with
// Job.Handler every delivery shares the closure; a redelivery after a
// crash would have a new process in production, which Job.NewWorker
// builds), result.TransactionLeftOpen, a handler that returned in a
// transaction or closed a connection inside one (its work there rolled
// back, though it believes it did it), result.CleanRunsDisagree, two
// clean runs that did different work (a counter kept across calls,
// randomness or time.Now() deciding what the handler does), so that what
// differed was compared nowhere, and result.GoroutineOutlived (below).
// result.ConnectionLeftOpen, a connection the handler opened on the DSN
// and left open, which the harness closed, is logged.
//
// A queue acks a delivery when its handler returns. A goroutine the
// handler started that runs a statement or makes an effect call after
// that does its work unacked, where a crash loses it and nothing
// redelivers the job: result.WorkAfterAck, "acked before its work was
// done", naming the delivery and its calls. So a delivery's connections
// and effect clients stay open and watched after its handler returns, for
// as long as goroutines the handler started (directly, or through
// sync.WaitGroup.Go or errgroup) run code of the binary's main module,
// at most 5s; the goroutines libraries start for themselves (an HTTP
// transport's reader, a pool's health check) are not waited for. One
// still running after 5s is result.GoroutineOutlived: what it did later
// was not checked.
//
// Noise is left out without configuration: columns that differ between
// two clean runs (now(), random UUIDs) are volatile and named in the log,
// per path inside json and jsonb values; serial and identity values, and
// the foreign keys that point at them, compare by rank, because a
// rolled-back attempt burns sequence values. A value the handler draws
// from a sequence itself ('X-' || nextval('doc_seq')) is compared as it
// is, and the finding names the sequence a rolled-back attempt advanced;
// SequenceColumns compares it by rank instead.
//
// # Time
//
// Read the time from Delivery.Now (pass the job d.Now where production
// passes time.Now). The harness clock starts every scenario and both
// clean runs at the same instant, 2026-01-01T09:00:00Z unless
// Config.ClockStart says otherwise, and only faults move it: a
// redelivery comes after the queue's visibility timeout (30s), a redrive
// 72h later. So a timestamp from Delivery.Now compares exactly, and one a
// redelivery moves is a finding.
//
// # Effects
//
// Work that leaves the database goes through the delivery's fakes
// (package effects), which record every call as a step and an effect:
// Delivery.Mail (no deduplication), Delivery.Payments (Stripe's
// idempotency keys, remembered 24h on the harness clock),
// Delivery.Effect around a client of your own, Delivery.HTTPClient for
// SDKs and net/http (a Stripe-shaped provider and a generic one behind
// it) and Delivery.SMTPAddr for SMTP. Each effect kind is exactly-once
// unless Config.EffectPolicies says at-least-once (receipts),
// at-most-once or repeatable. Under an effect fault the call returns a
// *effects.CallError and the handler goes on.
//
// # Queues
//
// Without Job.Queue the job is delivered by queue.Model: a success is
// acked, anything else is handed out again after its visibility timeout
// (30s; set Job.Queue to queue.Model{VisibilityTimeout: 5 * time.Minute}
// to change it, with CancelAtVisibilityTimeout to cancel the first
// delivery's context there). A queue adapter (adapters/river,
// adapters/gue, adapters/asynq, adapters/watermill, adapters/kafka,
// adapters/nats, each a module of its own) returns a Job that carries
// its queue: the queue library's own code enqueues, hands out, acks and
// retries, its schema is applied before Config.Setup, its bookkeeping is
// no step of the handler's, and its own rows are left out of the
// comparison while rows the handler inserts (child jobs) are compared.
// A delivery the queue refuses (a deduplicated producer copy, a job
// already completed or held by another attempt) is "not delivered", an
// outcome of its own. A job not due yet (a scheduled or snoozed job)
// runs where it is due: the harness moves its clock there. When
// deliveries overlap, the one handed out last decides whether the job
// completed, as with SQS's latest receipt.
//
// # Reading a finding
//
// A failed check prints one message, starting "[twice] not idempotent":
// the job, how many scenarios differ, and for each kind of difference the
// schedule that shows it (faults.Parse reads it), the table or effect diff
// as go-cmp prints it, (-once +twice), the other schedules that differ the
// same way, and the go test line that reruns it. A failing scenario's
// database is kept and logged (a local cluster's is also dumped to a
// file, since the cluster stops with the test binary); twice kept lists
// them. A passing check drops its databases.
//
// Every finding is confirmed: a failing schedule runs again on a fresh
// database, and one that does not fail the same way is "[twice] flaky",
// never a pass. So is a pass the executor decided by timing (a step
// granted while another delivery's statement waited on a lock, a
// wall-clock limit, two returns at once, a fetch beside a handler that
// settles with its queue itself: result.Scenario.Races): its
// schedule runs again too, and one that then fails is flaky, not a pass.
// "[twice] internal" is the harness's own failure, never a
// finding; a handler, worker factory or setup that fails on the clean run
// is the user's error, named with its delivery or step. A handler that
// calls t.Fatal, hangs past Config.DeliveryTimeout, or returns with a
// transaction open is named too (the last with a warning).
//
// What the check learned is a value: Check and Run return a *Result (an
// Exploration holds one) wrapping a result.Result (package harness/result), with the
// check's outcome, every scenario, each delivery's steps and the fate of
// each step. The twice command reads the same values.
//
// Under go test -v a passing check logs one line, with the columns and
// paths it left out as volatile (and a hint when they hold times: fill
// them from Delivery.Now), and a running one logs its progress every 10s,
// naming the delivery it has waited on longest. A dead delivery's
// goroutine still running when the check ends (a client retrying with
// backoff, deaf to its context) is logged once.
//
// A check that would test nothing is an error, not a pass: a handler that
// took no step, faults that give no scenario, a crash past the job's last
// step, an IgnoreTables or IgnoreColumns entry naming nothing, and input
// that means nothing (faults.CrashAt(0), a negative duration).
//
// # Flags
//
// A test binary's -twice.* flags, each mirrored by a TWICE_* environment
// variable (the flag wins): -twice.replay runs one schedule (ReplayEnv);
// -twice.checks and -twice.seed steer Explore (ChecksEnv, SeedEnv);
// -twice.keep=false drops a failed check's databases (KeepEnv);
// -twice.shard=i/n runs shard i of n of every check's schedules
// (ShardEnv; twice report -merge joins the shards' reports);
// -twice.parallel=N runs N scenarios of a check at once (ParallelEnv,
// GOMAXPROCS by default). Explore saves failing schedules under
// testdata/twice/<Test>/ and replays them first on the next run.
//
// Shards need no coordination: each check expands its whole schedule list
// from its own clean runs and deals it out in turn, so shards 1/n to n/n
// together run every schedule once. A test that asserts on its check's
// scenarios sees only its shard's: guard such assertions with
// if res.Shard != nil { return }. A check marked ExpectFinding does not
// fail a shard that ran none of its failing scenarios; the merged report
// shows the job's verdict.
//
// # Getting PostgreSQL
//
// One server per test binary, shared by its tests and stopped when the
// binary exits, found in this order (TWICE_POSTGRES=url|local|docker
// forces one):
//
//  1. TWICE_DATABASE_URL, a server you run (a CI service); its user must
//     be allowed to create databases;
//  2. PostgreSQL server binaries (initdb, postgres) on PATH or under
//     /usr/lib/postgresql/*/bin: a throwaway cluster in a temporary
//     directory on a unix socket, its initdb cached for later runs (as
//     root, the server runs as an unprivileged user);
//  3. Docker through testcontainers-go, image TWICE_POSTGRES_IMAGE
//     (postgres:16-alpine by default), driven by the small program
//     cmd/twice-pgdocker, which the first test binary that needs it
//     builds with your module's go (TWICE_PGDOCKER names a prebuilt one);
//     your go.mod and go.sum are never changed.
//
// The harness creates, changes and drops only databases whose names it
// generated (twice_<run id>_..., commented "twice run <run id>"), and
// never writes to any other database. Databases a killed run left are
// dropped by a later run only when both name and comment match and no
// session uses them; kept evidence (twice_kept_...) stays until dropped.
// On a URL server a watchdog process also drops the run's own databases
// when the test binary exits. A run killed while it creates a database,
// before the comment, leaves it unmarked: drop it by hand. A kept
// database is logged without its password; on a local or Docker server,
// which stops with the test binary, it is also dumped (in Docker by the
// container's own pg_dump) to $TMPDIR/twice-kept-<uid>/<run ID>/ with the
// command that restores it, and a dump that fails is said in the log and
// the report.
// As a superuser (the local and Docker servers always) the template gets
// a statement trigger on every table, so a scenario reads and resets only
// the tables it or the clean run wrote; without one every table is read.
//
// # Limits
//
// Run is safe to call from parallel tests. A handler must reach the
// database only through its Delivery (DB, SQL or DSN), call external
// systems through the Delivery's fakes, read the time from Delivery.Now
// where faults should move it, and not keep connections past its return
// (they are closed). A handler that sets session_replication_role =
// replica writes past the change trigger. A read-looking statement whose
// function only calls pg_notify, or only nextval, is not reliably a
// commit point (see package faults); nextval and setval named in the
// statement itself always are.
package harness
