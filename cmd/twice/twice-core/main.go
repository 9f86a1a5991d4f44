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

	"github.com/runtwice/twice/cmd/twice/internal/about"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/redact"
)

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
		_, _ = fmt.Fprint(stderr, about.Usage)
		return 2
	}
	switch args[0] {
	case "report":
		return reportCommand(args[1:], sc, stdout, stderr)
	case "plan":
		return planCommand(args[1:], stdout, stderr)
	case "replay":
		return replayCommandRun(args[1:], stdout, stderr)
	case "kept":
		return keptCommand(args[1:], stdout, stderr)
	case "version", "-version", "--version":
		_, _ = fmt.Fprint(stdout, about.VersionLine())
		return 0
	case "help", "-h", "-help", "--help":
		_, _ = fmt.Fprint(stdout, about.Usage)
		return 0
	}
	say(stderr, "unknown command %q", args[0])
	_, _ = fmt.Fprint(stderr, about.Usage)
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

// say prints a line of the command's output: with sayErr, the one place
// twice-core tags what it prints (blame.Line).
func say(w io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintln(w, blame.Line(format, args...))
}

// sayErr prints err as the user reads it: tagged, with the label of whose
// fault it is (blame.Message).
func sayErr(w io.Writer, err error) {
	_, _ = fmt.Fprintln(w, blame.Message(err))
}
