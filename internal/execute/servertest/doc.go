// Package servertest holds the executor's tests that need a real
// PostgreSQL server: a run without the harness, and the connections the
// executor parks between checks (the queue's, the one that asks about
// locks). They are a package of their own so that `go test
// ./internal/execute` runs the core with no server, and so that what they
// assert of the process's parking (one backend kept from one check to
// the next) does not depend on another package's tests: beside the
// harness's, in one process and on one server, the executor may find
// too little room to park (Executor.Close sheds parked sessions when
// fewer than a quarter of max_connections are left), and
// TestQueueConnOutlivesTheCheck failed so in CI. It has no code.
package servertest
