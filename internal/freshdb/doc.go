// Package freshdb gives every scenario its own database, identical to a
// template built once from the user's schema and fixtures, on a shared
// PostgreSQL server, and touches no database it did not create.
//
// # Use
//
//	steps, err := freshdb.FromFS(migrations, "migrations")
//	tpl, err := freshdb.Prepare(ctx, srv, steps) // once per content hash per process
//	db, err := tpl.Fresh(ctx)                    // exclusively yours; open any connections
//	defer db.Drop(ctx)                           // or db.Keep(ctx) to leave it for a human
//
// # How a fresh database is made
//
// Chosen by BenchmarkHandOut and BenchmarkScenario (see README.md): Fresh
// hands out an idle clone of the template, and Drop resets the clone in place
// (close leftover sessions; find the tables written since the last reset,
// by row count and xmin; with session_replication_role = replica delete
// those tables' rows, reinsert the template's rows through their text form,
// set sequences back) and pools it. A clone whose catalog
// changed (a handler ran DDL) or whose reset failed is dropped instead; a new
// clone (CREATE DATABASE ... TEMPLATE ... STRATEGY WAL_LOG) is made when no
// idle one exists. Without superuser rights, before PostgreSQL 14, or with
// ENABLE ALWAYS triggers, every Fresh is a new clone and Drop drops it.
//
// # Safety
//
// Every database this package creates is named twice_<run ID>_<suffix>
// (RunPrefix), and it creates, changes and drops no other. Each process
// ("run") holds a session-level advisory lock keyed on its run ID on a
// maintenance connection for its whole life; the first Prepare on a server
// drops twice_<id>_* databases whose run's lock is not held (CleanStale),
// which works across machines sharing the server. Every database is given
// the comment "twice run <run ID>" (pgserver.RunMarker) as it is created,
// and both cleanups below drop only databases whose comment names the run
// in their name: a foreign database that merely looks like ours
// (twice_deadbeef_d1) stays. Kept databases are renamed
// twice_kept_<run ID>_<n> and never dropped by this package. DropAll drops
// what the process still holds. On a Server with a DropOnExit method
// (*pgserver.Server), the first database a run creates there first asks the
// Server to drop the run's marked twice_<run ID>_* once the process has
// exited, for any reason: a test binary without a TestMain, or a killed
// one, leaves nothing behind either.
package freshdb
