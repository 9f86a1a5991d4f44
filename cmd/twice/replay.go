package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/internal/record"
)

func replayCommandRun(args []string, stdout, stderr io.Writer) int {
	args, env, err := splitTwiceFlags(args)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, err)
		return 2
	}
	fs := flag.NewFlagSet("twice replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var g goTestFlags
	g.register(fs)
	g.env = env
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) == 0 || len(pos) > 2 {
		_, _ = fmt.Fprintf(stderr, "[twice] replay takes a schedule and at most one package, got %d arguments\n%s", len(pos), usage)
		return 2
	}
	schedule := pos[0]
	if _, err := faults.Parse(schedule); err != nil {
		_, _ = fmt.Fprintf(stderr, "%v\n[twice] quote the schedule as the report prints it: twice replay 'j1a1w1!crash:3 > +30s j1a2w2' ./pkg -run TestX\n", err)
		return 2
	}
	if g.run == "" {
		_, _ = fmt.Fprintln(stderr, "[twice] replay needs -run naming the test that checks the job, e.g. -run '^TestRewardByIncrement$': a schedule is a job's, and other checks would replay it too")
		return 2
	}
	pkg := "."
	if len(pos) == 2 {
		pkg = pos[1]
	}
	goBin, err := findGo()
	if err != nil {
		_, _ = fmt.Fprintln(stderr, err)
		return 2
	}
	testArgs := append(append([]string{"test"}, g.args()...), "-v", pkg)
	_, _ = fmt.Fprintf(stdout, "[twice] %s=%s go %s\n", record.ReplayEnv, shellQuote(schedule), strings.Join(testArgs, " "))
	// Each check that runs writes a record here: none means -run matched
	// no test that checks a job, and nothing was replayed.
	recDir, err := os.MkdirTemp("", "twice-replay-*")
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "[twice] internal: cannot make a directory for the harness results: %v\n", err)
		return 2
	}
	defer func() { _ = os.RemoveAll(recDir) }()
	cmd := exec.Command(goBin, testArgs...)
	cmd.Env = append(append(os.Environ(), record.ReplayEnv+"="+schedule, record.DirEnv+"="+recDir), g.env...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err = cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		if recs, _ := filepath.Glob(filepath.Join(recDir, "*.json")); len(recs) == 0 {
			_, _ = fmt.Fprintf(stderr, "[twice] replay: -run %q matched no test of %s that checks a job (harness.Check or harness.Explore), so nothing was replayed\n", g.run, pkg)
			return 2
		}
		_, _ = fmt.Fprintln(stdout, "[twice] replay: the schedule ran and the test passed")
		return 0
	case errors.As(err, &exitErr) && exitErr.ExitCode() == 1:
		_, _ = fmt.Fprintln(stdout, "[twice] replay: the test failed; its output above holds the diff")
		return 1
	case errors.As(err, &exitErr):
		return 2
	}
	_, _ = fmt.Fprintf(stderr, "[twice] cannot run go test: %v\n", err)
	return 2
}
