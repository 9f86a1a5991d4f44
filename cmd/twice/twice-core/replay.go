package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/runtwice/twice/cmd/twice/internal/about"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/record"
	"github.com/runtwice/twice/internal/report"
)

func replayCommandRun(args []string, stdout, stderr io.Writer) int {
	args, env, err := splitTwiceFlags(args)
	if err != nil {
		sayErr(stderr, err)
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
		say(stderr, "replay takes a schedule and at most one package, got %d arguments", len(pos))
		_, _ = fmt.Fprint(stderr, about.Usage)
		return 2
	}
	schedule := pos[0]
	if _, err := faults.Parse(schedule); err != nil {
		sayErr(stderr, blame.User(err))
		say(stderr, "quote the schedule as the report prints it: twice replay 'j1a1w1!crash:3 > +30s j1a2w2' ./pkg -run TestX")
		return 2
	}
	if g.run == "" {
		say(stderr, "replay needs -run naming the test that checks the job, e.g. -run '^TestRewardByIncrement$': a schedule is a job's, and other checks would replay it too")
		return 2
	}
	pkg := "."
	if len(pos) == 2 {
		pkg = pos[1]
	}
	goBin, err := findGo()
	if err != nil {
		sayErr(stderr, err)
		return 2
	}
	list := listPackages(goBin, g.tags, []string{pkg})
	if len(list.missing) > 0 {
		_, _ = fmt.Fprintf(stderr, "%s; replay takes the package of the test that checks the job, as the report's replay line names it\n", noPackageLine(list.missing[0]))
		return 2
	}
	testArgs := append(append([]string{"test"}, g.args()...), "-v", pkg)
	say(stdout, "%s=%s go %s", record.ReplayEnv, shellQuote(schedule), strings.Join(testArgs, " "))
	// Each check that runs writes a record: none means -run matched no
	// test that checks a job, and nothing was replayed. go test -json
	// tells a build failure from a failing test; its output is what go
	// test -v prints.
	rd, err := newRunDir()
	if err != nil {
		sayErr(stderr, err)
		return 2
	}
	defer rd.remove()
	jsonArgs := append(append([]string{"test", "-json"}, g.args()...), pkg)
	cmd := exec.Command(goBin, jsonArgs...)
	cmd.Env = append(append(os.Environ(), record.ReplayEnv+"="+schedule, record.DirEnv+"="+rd.records(), "GOTMPDIR="+rd.goTmp()), g.env...)
	cmd.Stderr = stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		sayErr(stderr, blame.AsInternal(err))
		return 2
	}
	child, err := startSupervised(cmd)
	if err != nil {
		say(stderr, "cannot run go test: %v", err)
		return 2
	}
	runs := newTestRuns()
	readErr := runs.read(pipe, func(e testEvent) {
		if e.Action == "output" || e.Action == "build-output" {
			_, _ = io.WriteString(stdout, e.Output)
		}
	})
	sig, waitErr := child.wait()
	// Lines that were not events: a go command error.
	_, _ = io.WriteString(stdout, runs.stray.String())
	if sig != nil {
		_, _ = fmt.Fprintln(stderr, interruptedLine(sig, "nothing replayed"))
		return 2
	}
	var exitErr *exec.ExitError
	if readErr != nil || (waitErr != nil && !errors.As(waitErr, &exitErr)) {
		say(stderr, "go test did not finish: %v", errors.Join(readErr, waitErr))
		return 2
	}
	recs, unreadable, err := record.ReadAll(rd.records())
	if err != nil {
		sayErr(stderr, err)
		return 2
	}
	cwd, _ := os.Getwd()
	r := &report.Report{}
	(&builder{runs: runs, dirs: list.dirs, cwd: cwd, unreadable: unreadable}).build(r, recs)
	r.Finish()
	return replayVerdict(r, pkg, g.run, schedule, waitErr != nil, stdout, stderr)
}

// replayVerdict says what the replay showed, in one sentence of its own
// for each way it can end, and returns the exit code: 0 the job is
// idempotent under the schedule (or differs as its test expects), 1 it is
// not or the test failed, 2 nothing could be replayed.
func replayVerdict(r *report.Report, pkg, run, schedule string, goTestFailed bool, stdout, stderr io.Writer) int {
	for _, p := range r.Summary.Problems {
		switch {
		case p.Kind == report.ProblemBuildFailed:
			say(stderr, "replay: %s does not compile (the errors are above), so nothing was replayed", p.Package)
			return 2
		case p.Fatal:
			_, _ = fmt.Fprintln(stderr, p.Message+"; nothing was replayed")
			return 2
		}
	}
	code := 0
	for _, j := range r.Jobs {
		switch j.Outcome {
		case report.OutcomeFinding, report.OutcomeFlaky:
			say(stdout, "replay: job %q is not idempotent under %s; the diff is above", j.Name, shellQuote(schedule))
			code = 1
		case report.OutcomeExpected:
			say(stdout, "replay: job %q differs under %s, as its test expects (%s); the diff is above", j.Name, shellQuote(schedule), j.Expected)
		default:
			say(stdout, "replay: job %q is idempotent under %s", j.Name, shellQuote(schedule))
		}
	}
	for _, p := range r.Summary.Problems {
		if p.Kind == report.ProblemTestFailed {
			_, _ = fmt.Fprintln(stdout, p.Message)
			code = 1
		}
	}
	if len(r.Jobs) == 0 && code == 0 {
		if goTestFailed {
			say(stderr, "replay: go test of %s failed before any check ran; see its output above", pkg)
			return 1
		}
		say(stderr, "replay: -run %q matched no test of %s that checks a job (harness.Check or harness.Explore), so nothing was replayed", run, pkg)
		return 2
	}
	return code
}
