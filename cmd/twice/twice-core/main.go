// Command twice-core is the twice command proper: cmd/twice builds it on
// demand, with the go command of the module it runs in, and runs it with
// its arguments (see cmd/twice for what it does). It is a command of its
// own so that `go run ./cmd/twice` compiles only the standard library
// before its first line, and so that the report is built by the twice
// version the module's tests run.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/runtwice/twice/internal/redact"
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

// run is the command with its streams, for tests. Everything it prints
// passes the scrubber of the connection settings it was given (the
// environment and -twice.NAME=VALUE flags), whatever printed it.
func run(args []string, stdout, stderr io.Writer) int {
	sc := scrubberFor(args)
	stdout, stderr = sc.Writer(stdout), sc.Writer(stderr)
	if len(args) == 0 {
		_, _ = fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "report":
		return reportCommand(args[1:], sc, stdout, stderr)
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

// scrubberFor masks the secrets of the connection settings in the
// environment and in the -twice.NAME=VALUE flags of args.
func scrubberFor(args []string) *redact.Scrubber {
	env := os.Environ()
	if _, flagEnv, err := splitTwiceFlags(args); err == nil {
		env = append(env, flagEnv...)
	}
	return redact.FromEnv(env)
}
