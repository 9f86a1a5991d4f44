// Package harness checks that a background-job handler is idempotent: that
// running it twice has the same effect as running it once.
//
// # How a check runs
//
// The harness gets a real PostgreSQL server (see "Getting PostgreSQL"),
// builds a template database from the job's Setup once, and gives every
// scenario an identical fresh clone. It runs the job once, cleanly, on two
// fresh databases: the first is the reference state; columns that differ
// between the two (now(), random UUIDs) are volatile and left out of every
// comparison. Then it executes every schedule of the configured faults on a
// fresh database of its own, snapshots every user table, and compares the
// rows with the reference using go-cmp. Values drawn from sequences, and the
// foreign keys that point at them, are compared after canonical
// renumbering, because a rolled-back attempt burns sequence values.
//
// A scenario is not idempotent when its state differs from the reference,
// or when its last delivery returns an error: the job must still complete
// after the faults, so a retry that always fails is a finding too.
//
// # Writing a check
//
// Adapt the handler to a Job: each Delivery carries the job ID and attempt,
// a pgx pool and a DSN of its own (for database/sql, lib/pq or an ORM), and
// the harness clock.
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
// A failed check prints one message: every scenario that differs, its
// schedule, the per-table diff (-once +twice), and the go test line that
// reruns it. Its databases are kept and logged; a passing check drops them.
// Mark a job known not to be idempotent with Config.ExpectFinding.
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
// Run is safe to call from parallel tests. A handler must reach the
// database only through its Delivery (DB or DSN) and must not keep
// connections past its return.
package harness
