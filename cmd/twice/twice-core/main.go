// Command twice runs the idempotency checks of Go packages and writes a
// report people read and CI systems ingest.
//
//	twice report [flags] [packages]
//	twice replay '<schedule>' [package] -run TestX
//
// # twice report
//
// Report runs the packages' tests with go test -json (default ./...),
// collects the result of every harness.Check and writes twice-report/ (or
// -o DIR):
//
//   - index.html: a self-contained page with the job × fault matrix and,
//     per finding, the schedule as a sequence diagram, the state and
//     effect diffs, and the command that replays it;
//   - summary.md: the same in Markdown, diagrams as Mermaid blocks; it is
//     appended to $GITHUB_STEP_SUMMARY when that is set;
//   - junit.xml: one testcase per job × fault (see internal/report);
//   - report.json: the whole report, schema in internal/report/SCHEMA.md.
//
// The directory is written whole or not at all: twice writes a temporary
// directory next to it and renames it.
//
// With -shard i/n (1/3, 2/3, 3/3: counted from 1, as CI matrices number
// their jobs) every check runs only its shard of the schedules: the tests
// get TWICE_SHARD=i/n, and the report says which shard it is. A flag
// -twice.shard=i/n or $TWICE_SHARD does the same.
//
//	twice report -merge [-o DIR] shard-1/report.json shard-2/report.json ...
//
// joins the reports of every shard of one run (their report.json files,
// or the directories holding them) into the report the whole run would
// have written, all four files. It refuses shards of different runs: a
// shard missing or given twice, different shard counts, twice versions,
// git commits or go test commands, or a job whose clean run differs
// between shards.
//
// Flags -run, -count, -tags, -timeout, -race and -p pass through to go
// test. A flag -twice.NAME=VALUE becomes the environment variable
// TWICE_NAME=VALUE of the tests, which is how the harness reads its
// settings (TWICE_DATABASE_URL, exploration budgets).
//
// Exit codes:
//
//	0  every job is idempotent or an expected finding
//	1  a job is not idempotent and nothing said it would be, a job is
//	   flaky, or a test failed for another reason
//	2  the tool could not check: usage, no Go toolchain, a path that
//	   matches no package, a package that does not compile, a test binary
//	   that crashed or timed out, a check that could not run (a config
//	   error, no PostgreSQL), no harness check ran at all, or a signal
//
// SIGINT or SIGTERM stops go test, its test binaries and their PostgreSQL,
// removes the run's temporary files and exits 2 with a line saying so.
// Each run keeps its files (the harness's records, go's build
// directories) in a directory of its own under $TMPDIR, twice-run-*,
// whose owner file names the twice process by PID and start time; a run
// removes the directories of runs on this host that are no longer
// running (a SIGKILLed twice cannot clean up), and nothing else.
//
// A package whose tests ran but called no harness.Check is a warning in
// the report, not an error, so twice report ./... works on a module where
// only some packages have jobs; if no package has one, twice exits 2.
//
// A finding is expected when the check's Config.ExpectFinding says so, or
// when its test passed anyway (the test asserts the finding itself).
//
// # twice replay
//
// Replay reruns one schedule, as printed in a finding or the report, and
// prints the test's output with its diff. It runs
//
//	TWICE_REPLAY='<schedule>' go test -run TestX -count=1 -v [package]
//
// and exits 0 when the job is idempotent under the schedule (or differs
// as its test expects), 1 when it is not or the test failed for another
// reason, 2 when nothing could be replayed: a path that matches no
// package, a package that does not compile, a check that could not run,
// a -run that matches no test checking a job. The package defaults to
// the current directory.
//
// # twice kept
//
// Kept lists the evidence failed checks left: databases renamed
// twice_kept_<run ID>_<n> on the server of TWICE_DATABASE_URL, which no
// cleanup drops, and the dump files of databases kept on a server that
// stopped with its test (the local cluster, Docker), one directory per
// run, with the command that restores each. It acts on one run's
// evidence: the latest run's, or -run ID's (the 8 hex digits of
// twice_kept_<ID>_<n>); -all on every run's. -drop drops those databases
// and removes those files, or only the ones named. Nothing not named like
// a kept database is listed or touched.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `usage:
  twice report [-o DIR] [-shard I/N] [-run REGEXP] [-count N] [-tags TAGS] [-timeout D] [-race] [-p N] [-twice.NAME=VALUE] [packages]
  twice report -merge [-o DIR] shard-1/report.json shard-2/report.json ...
  twice replay '<schedule>' [package] -run TestX [-tags TAGS] [-timeout D] [-race]
  twice kept [-drop] [-run ID | -all] [twice_kept_NAME...]

report runs the packages' harness checks (default ./...) and writes
twice-report/{index.html,summary.md,junit.xml,report.json}.
-shard I/N runs shard I of N of every check's schedules; -merge joins the
shards' reports into one.
Exit codes: 0 idempotent or expected findings, 1 unexpected findings or
failing tests, 2 the tool could not check (usage, no such package, build
failure, a check that could not run, interrupted).
replay reruns one schedule and prints its diff.
kept lists the databases failed checks kept as evidence (on the server of
TWICE_DATABASE_URL) and their dump files (local cluster), of the latest
run (-run ID: another run's; -all: every run's); -drop removes them.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command with its streams, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		_, _ = fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "report":
		return reportCommand(args[1:], stdout, stderr)
	case "replay":
		return replayCommandRun(args[1:], stdout, stderr)
	case "kept":
		return keptCommand(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		_, _ = fmt.Fprint(stdout, usage)
		return 0
	}
	_, _ = fmt.Fprintf(stderr, "[twice] unknown command %q\n%s", args[0], usage)
	return 2
}
