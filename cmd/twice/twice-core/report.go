package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/record"
	"github.com/runtwice/twice/internal/redact"
	"github.com/runtwice/twice/internal/report"
)

// maxStepSummary keeps what twice appends to $GITHUB_STEP_SUMMARY under
// GitHub's 1 MiB limit per step.
const maxStepSummary = 1000 << 10

// goTestFlags are the go test flags twice passes through.
type goTestFlags struct {
	run, count, tags, timeout, p string
	race                         bool
	env                          []string // TWICE_NAME=VALUE from -twice.NAME=VALUE
}

func (g *goTestFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.run, "run", "", "run only the tests matching `regexp` (go test -run)")
	fs.StringVar(&g.count, "count", "", "run each test `n` times (go test -count); default 1, so results are never cached")
	fs.StringVar(&g.tags, "tags", "", "build `tags` (go test -tags)")
	fs.StringVar(&g.timeout, "timeout", "", "go test -timeout `duration`")
	fs.BoolVar(&g.race, "race", false, "enable the race detector (go test -race)")
	fs.StringVar(&g.p, "p", "", "build and test `n` packages at once (go test -p)")
}

// args are the go test flags, before the packages.
func (g *goTestFlags) args() []string {
	count := g.count
	if count == "" {
		count = "1"
	}
	out := []string{"-count=" + count}
	for _, f := range []struct{ name, v string }{{"run", g.run}, {"tags", g.tags}, {"timeout", g.timeout}, {"p", g.p}} {
		if f.v != "" {
			out = append(out, "-"+f.name+"="+f.v)
		}
	}
	if g.race {
		out = append(out, "-race")
	}
	return out
}

// splitTwiceFlags takes -twice.NAME=VALUE flags out of args and returns
// them as TWICE_NAME=VALUE environment entries.
func splitTwiceFlags(args []string) (rest, env []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, ok := strings.CutPrefix(strings.TrimLeft(a, "-"), "twice.")
		if !ok || !strings.HasPrefix(a, "-") {
			rest = append(rest, a)
			continue
		}
		name, value, hasValue := strings.Cut(name, "=")
		if !hasValue {
			if i+1 >= len(args) {
				return nil, nil, blame.Userf("flag %s needs a value: -twice.%s=VALUE", a, name)
			}
			i++
			value = args[i]
		}
		key := "TWICE_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(name))
		env = append(env, key+"="+value)
	}
	return rest, env, nil
}

// parseInterleaved parses flags that may come before, between or after
// positional arguments, as go test allows.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func reportCommand(args []string, sc *redact.Scrubber, stdout, stderr io.Writer) int {
	args, env, err := splitTwiceFlags(args)
	if err != nil {
		sayErr(stderr, err)
		return report.ExitBroken
	}
	fs := flag.NewFlagSet("twice report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "twice-report", "write the report into `dir`")
	shardText := fs.String("shard", "", "run only shard `i/n` of every check's schedules (1/3, 2/3, 3/3), as TWICE_SHARD does; join the shards' reports with -merge")
	merge := fs.Bool("merge", false, "join the shards' reports given instead of packages (their report.json files or directories) into one")
	timings := fs.String("timings", "", "deal each check's schedules to the shards by what they cost in `report.json` (a previous run's, merged if it was sharded), so the shards finish together; needs -shard")
	rerunFailed := fs.String("rerun-failed", "", "run again exactly the failing schedules of `report.json` (a previous run's, or its directory), in their packages and tests")
	var g goTestFlags
	g.register(fs)
	g.env = env
	pkgs, err := parseInterleaved(fs, args)
	if err != nil {
		return report.ExitBroken
	}
	if *merge {
		if *shardText != "" {
			say(stderr, "-merge joins the reports of every shard; it takes no -shard")
			return report.ExitBroken
		}
		return mergeCommand(pkgs, *out, sc, stdout, stderr)
	}
	shard, env, err := shardOf(*shardText, g.env)
	if err != nil {
		sayErr(stderr, err)
		return report.ExitBroken
	}
	g.env = env
	var plan planner
	rerunOf := ""
	switch {
	case *timings != "" && *rerunFailed != "":
		say(stderr, "-rerun-failed runs the failing schedules of one report; it takes no -timings")
		return report.ExitBroken
	case *timings != "" && shard == nil:
		say(stderr, "-timings %s deals the schedules to shards, and this run is not one; give -shard i/n (or %s)", *timings, record.ShardEnv)
		return report.ExitBroken
	case *timings != "":
		if plan, err = timingsPlanner(*timings, shard.Count); err != nil {
			sayErr(stderr, err)
			return report.ExitBroken
		}
	case *rerunFailed != "" && (len(pkgs) > 0 || g.run != ""):
		say(stderr, "-rerun-failed %s picks the packages and tests that failed; it takes no packages and no -run", *rerunFailed)
		return report.ExitBroken
	case *rerunFailed != "":
		var run string
		plan, pkgs, run, err = rerunPlanner(*rerunFailed)
		if errors.Is(err, errNothingFailed) {
			say(stdout, "%s has no failing schedule: nothing to rerun", *rerunFailed)
			return report.ExitOK
		}
		if err != nil {
			sayErr(stderr, err)
			return report.ExitBroken
		}
		g.run, rerunOf = run, *rerunFailed
	}
	if len(pkgs) == 0 {
		pkgs = []string{"./..."}
	}
	// Claimed before any check runs: a directory twice may not write, or
	// one another run is writing, is refused while nothing is lost.
	dir, err := report.ClaimDir(*out)
	if err != nil {
		sayErr(stderr, err)
		return report.ExitBroken
	}
	defer dir.Release()
	prog := newProgress(stderr)
	r, sig := runReport(g, pkgs, plan, prog)
	if sig != nil {
		_, _ = fmt.Fprintln(stderr, interruptedLine(sig, "no report written"))
		return report.ExitBroken
	}
	r.Shard, r.Twice, r.Commit, r.RerunOf = shard, twiceVersion(), headCommit(), rerunOf
	return writeReport(r, dir, sc, stdout, stderr)
}

// writeReport writes r into dir, appends its summary to
// $GITHUB_STEP_SUMMARY, says what went wrong, and returns the exit code.
// What r holds of the tests' output is scrubbed of secrets first.
func writeReport(r *report.Report, dir *report.Dir, sc *redact.Scrubber, stdout, stderr io.Writer) int {
	sc.InPlace(r)
	if err := dir.Write(r); err != nil {
		sayErr(stderr, err)
		return report.ExitBroken
	}
	if dir.Note != "" {
		_, _ = fmt.Fprintln(stderr, dir.Note)
	}
	if path := os.Getenv("GITHUB_STEP_SUMMARY"); path != "" {
		if err := appendStepSummary(path, r.Markdown()); err != nil {
			say(stderr, "cannot append the summary to $GITHUB_STEP_SUMMARY (%s): %v", path, err)
		}
	}
	if none := r.WithoutCheck(); len(none) > 0 {
		var names []string
		for _, n := range none {
			names = append(names, n.Package)
		}
		say(stdout, "without a check (nothing to report for them): %s", strings.Join(names, ", "))
	}
	for _, g := range r.WithoutCheckWorkers() {
		say(stdout, "workers without a check: the %s of %s %s registers %s, which no sample checks", g.Registry, g.Package, g.Test, strings.Join(g.Unchecked, ", "))
	}
	for _, p := range r.ShownProblems() {
		_, _ = fmt.Fprintln(stdout, p.Message)
		if p.Output != "" && (p.Fatal || p.Kind == report.ProblemTestFailed) {
			_, _ = fmt.Fprintln(stdout, indentLines(p.Output, "    "))
		}
	}
	for _, j := range r.Jobs {
		if j.Outcome == report.OutcomeFinding || j.Outcome == report.OutcomeFlaky {
			say(stdout, "%s: job %q (%s %s): %d of %d scenarios differ; rerun: %s", j.Outcome, j.Name, j.Package, j.Test, j.Failed, j.Scenarios, j.Rerun)
		}
	}
	_, _ = fmt.Fprintln(stdout, r.Headline())
	say(stdout, "report: %s", filepath.Join(dir.Path(), report.FileHTML))
	return r.ExitCode
}

// runReport runs go test and builds the report; every failure to run
// ends up in the report as a problem. A signal that stops the run is
// returned instead, with no report: what ran is cut short, and the run's
// files are gone.
//
// plan, if any, makes the plan the tests read (record.PlanEnv).
func runReport(g goTestFlags, pkgs []string, plan planner, prog *progress) (*report.Report, os.Signal) {
	started := time.Now()
	host, _ := os.Hostname()
	r := &report.Report{Started: started, Host: host}
	cwd, err := os.Getwd()
	if err != nil {
		return broken(r, started, blame.Line("cannot read the working directory: %v", err)), nil
	}
	goBin, err := findGo()
	if err != nil {
		return broken(r, started, blame.Message(err)), nil
	}
	// Said before go is first asked anything: with an empty build cache
	// and a busy machine even go list takes seconds, and go run had the
	// user wait for twice's own build already.
	prog.announce(pkgs)
	// The most go test may compile, for progress, counted while go list
	// names the packages: it reads the same files.
	deps := make(chan int, 1)
	go func() { deps <- countDeps(goBin, g.tags, pkgs) }()
	list := listPackages(goBin, g.tags, pkgs)
	for _, m := range list.missing {
		r.Summary.Problems = append(r.Summary.Problems, report.Problem{Kind: report.ProblemNoPackage, Package: m.pattern, Fatal: true,
			Message: noPackageLine(m)})
	}
	// -x: go's trace of its compiles and links is all it says while it
	// builds, and progress counts them.
	testArgs := append(append([]string{"test", "-json", "-x"}, g.args()...), list.found...)
	r.Command = "go " + strings.Join(testArgs, " ")
	if len(list.found) == 0 {
		return broken(r, started, ""), nil
	}

	rd, err := newRunDir()
	if err != nil {
		return broken(r, started, blame.Message(err)), nil
	}
	defer rd.remove()
	env := g.env
	if plan != nil {
		p, err := plan(list.dirs)
		if err != nil {
			return broken(r, started, blame.Message(err)), nil
		}
		path := filepath.Join(rd.path, "plan.json")
		if err := record.WritePlan(path, p); err != nil {
			return broken(r, started, blame.Message(fmt.Errorf("writing the tests' plan: %w", err))), nil
		}
		env = append(slices.Clone(env), record.PlanEnv+"="+path)
	}

	cmd := exec.Command(goBin, testArgs...)
	cmd.Env = append(append(os.Environ(), record.DirEnv+"="+rd.records(), "GOTMPDIR="+rd.goTmp()), env...)
	var errBuf bytes.Buffer
	cmd.Stderr = &limitedWriter{w: &errBuf, n: maxOutput}
	stdoutPipe, err := cmd.StdoutPipe()
	if err != nil {
		return broken(r, started, blame.Message(err)), nil
	}
	child, err := startSupervised(cmd)
	if err != nil {
		return broken(r, started, blame.Line("cannot run %s: %v", r.Command, err)), nil
	}
	runs := newTestRuns()
	prog.start(list.total, <-deps, rd.records())
	readErr := runs.read(stdoutPipe, prog.event)
	sig, waitErr := child.wait()
	prog.stop()
	if sig != nil {
		return nil, sig
	}

	recs, unreadable, err := record.ReadAll(rd.records())
	if err != nil {
		r.Summary.Problems = append(r.Summary.Problems, report.Problem{Kind: report.ProblemGoTest, Fatal: true, Message: err.Error()})
	}
	b := &builder{runs: runs, dirs: list.dirs, cwd: cwd, unreadable: unreadable}
	b.build(r, recs)

	var exitErr *exec.ExitError
	switch {
	case readErr != nil:
		r.Summary.Problems = append(r.Summary.Problems, report.Problem{Kind: report.ProblemGoTest, Fatal: true,
			Message: blame.Message(fmt.Errorf("reading go test's output: %w", readErr))})
	case waitErr != nil && !errors.As(waitErr, &exitErr):
		r.Summary.Problems = append(r.Summary.Problems, report.Problem{Kind: report.ProblemGoTest, Fatal: true,
			Message: blame.Line("%s did not finish: %v", r.Command, waitErr)})
	case waitErr != nil && len(runs.packages) == 0:
		r.Summary.Problems = append(r.Summary.Problems, report.Problem{Kind: report.ProblemGoTest, Fatal: true,
			Message: blame.Line("%s failed before running any package: %s", r.Command, firstNonEmptyLine(errBuf.String())),
			Output:  strings.TrimSpace(errBuf.String() + runs.stray.String())})
	}
	if len(recs) == 0 && len(unreadable) == 0 && !hasFatal(r.Summary.Problems) {
		r.Summary.Problems = append(r.Summary.Problems, report.Problem{Kind: report.ProblemGoTest, Fatal: true,
			Message: blame.Line("no harness check ran in %s: nothing to report; point twice at packages whose tests call harness.Check", strings.Join(pkgs, " ")),
			Output:  strings.TrimSpace(errBuf.String())})
	}
	r.Duration = report.Ms(time.Since(started))
	r.Finish()
	return r, nil
}

// broken is a report that could not run go test at all.
// With msg empty, the problems are already in r.
func broken(r *report.Report, started time.Time, msg string) *report.Report {
	if msg != "" {
		r.Summary.Problems = append(r.Summary.Problems, report.Problem{Kind: report.ProblemGoTest, Fatal: true, Message: msg})
	}
	r.Duration = report.Ms(time.Since(started))
	r.Finish()
	return r
}

func hasFatal(ps []report.Problem) bool {
	for _, p := range ps {
		if p.Fatal {
			return true
		}
	}
	return false
}

// findGo finds the go command: on PATH, or under $GOROOT.
func findGo() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", blame.Userf("no Go toolchain: the go command is not on PATH (nor in $GOROOT/bin); install Go from https://go.dev/dl and run twice again")
}

// packageList is what go list made of the patterns twice was given.
type packageList struct {
	// dirs maps a package directory to its import path.
	dirs map[string]string
	// found are the patterns that name packages, in order; total counts
	// those packages, for progress.
	found []string
	total int
	// missing are the patterns that name none.
	missing []missingPattern
}

// missingPattern is a pattern that matches no package, with go's reason.
type missingPattern struct{ pattern, reason string }

func noPackageLine(m missingPattern) string {
	return blame.Line("%s matches no package (%s): name the directories of packages as go test takes them, e.g. ./... or ./examples/loyalty", m.pattern, m.reason)
}

// listPackages asks go list what the patterns name. A pattern that names
// no package is kept from go test, which would report it as a package
// that does not compile. When go list itself fails, every pattern is
// passed on: go test says what is wrong.
func listPackages(goBin, tags string, pkgs []string) packageList {
	out := packageList{dirs: map[string]string{}}
	for _, pattern := range pkgs {
		args := []string{"list", "-e", "-f", "{{.ImportPath}}\t{{.Dir}}\t{{with .Error}}{{.Err}}{{end}}"}
		if tags != "" {
			args = append(args, "-tags="+tags)
		}
		var stderr bytes.Buffer
		cmd := exec.Command(goBin, append(args, pattern)...)
		cmd.Stderr = &stderr
		stdout, err := cmd.Output()
		if err != nil {
			out.found = append(out.found, pattern)
			continue
		}
		n := 0
		var reason string
		for line := range strings.SplitSeq(strings.TrimRight(string(stdout), "\n"), "\n") {
			f := strings.SplitN(line, "\t", 3)
			if len(f) < 3 {
				continue
			}
			path, dir, listErr := f[0], f[1], f[2]
			if dir == "" && listErr != "" {
				reason = listErr
				continue
			}
			n++
			out.dirs[dir] = path
		}
		switch {
		case n > 0:
			out.found = append(out.found, pattern)
			out.total += n
		case reason != "":
			out.missing = append(out.missing, missingPattern{pattern, reason})
		default:
			out.missing = append(out.missing, missingPattern{pattern, strings.TrimSpace(strings.TrimPrefix(firstNonEmptyLine(stderr.String()), "go: warning: "))})
		}
	}
	return out
}

// countDeps counts the packages the tests of pkgs depend on, themselves
// and their test variants included: the most go test may have to compile.
func countDeps(goBin, tags string, pkgs []string) int {
	args := []string{"list", "-e", "-deps", "-test", "-f", "{{.ImportPath}}"}
	if tags != "" {
		args = append(args, "-tags="+tags)
	}
	out, err := exec.Command(goBin, append(args, pkgs...)...).Output()
	if err != nil {
		return 0
	}
	return strings.Count(string(out), "\n")
}

func appendStepSummary(path, md string) error {
	if len(md) > maxStepSummary {
		cut := strings.LastIndex(md[:maxStepSummary], "\n## ")
		if cut < 0 {
			cut = maxStepSummary
		}
		md = md[:cut] + "\n\n_The summary is cut here to stay under GitHub's limit; the whole report is in summary.md and index.html._\n"
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(md + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func firstNonEmptyLine(s string) string {
	for line := range strings.SplitSeq(s, "\n") {
		if strings.TrimSpace(line) != "" {
			return strings.TrimSpace(line)
		}
	}
	return "no output"
}

func indentLines(s, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+prefix)
}

// limitedWriter keeps the first n bytes written to it and drops the rest.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n <= 0 {
		return len(p), nil
	}
	q := p
	if len(q) > l.n {
		q = q[:l.n]
	}
	l.n -= len(q)
	if _, err := l.w.Write(q); err != nil {
		return 0, err
	}
	return len(p), nil
}
