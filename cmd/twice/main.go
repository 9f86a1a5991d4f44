// Command twice runs the idempotency checks of Go packages and writes a
// report people read and CI systems ingest.
//
//	twice report [flags] [packages]
//	twice plan -shards N [-timings report.json]
//	twice replay '<schedule>' [package] -run TestX
//	twice kept [-drop] [-run ID | -all]
//	twice version
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
// directory next to it and swaps it in. twice writes only into a
// directory it makes, an empty one, or one holding a previous report of
// its own (marked by a .twice-report file, with nothing but report files
// beside it); -o naming anything else (a file, a source package, a folder
// of other files, ".") exits 2 and leaves it as it is. -o is claimed
// before any check runs, so a path twice cannot write fails at once, and
// a second twice report into a directory another one is writing is
// refused (exit 2), not raced.
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
// Dealt in turn, the schedules of one check with a few costly faults can
// pile up on one shard. With -timings FILE (a previous run's report.json,
// or its directory: a whole run's or a merged one) every check deals its
// schedules by cost instead: each fault's schedules cost what they took
// in FILE, and the checks, in order of package, test and job, deal theirs
// costliest first, each to the shard with the least load so far, counting
// the loads of the checks before them; a check FILE does not know deals
// in turn. Every shard must be given the same FILE, and needs -shard (or
// the CI's variables).
//
//	twice plan -shards N [-timings report.json]
//
// prints, as JSON, the matrix of a CI job split into N shards (1 to 256,
// GitHub Actions' limit): {"include": [{"shard": "1/3", "index": 1}, ...]},
// each entry with load_ms, the milliseconds of schedules -timings deals
// it, when -timings is given.
//
//	twice report -rerun-failed report.json
//
// runs again exactly the schedules that failed in a previous report (its
// unexpected and flaky findings), each under its fault, in the packages
// and tests they failed in; it takes no packages and no -run. A check of
// those tests none of whose schedules failed runs its clean runs only. A
// report with nothing failing has nothing to rerun: twice says so and
// exits 0, writing no report.
//
// Flags -run, -count, -tags, -timeout, -race and -p pass through to go
// test. A flag -twice.NAME=VALUE becomes the environment variable
// TWICE_NAME=VALUE of the tests, which is how the harness reads its
// settings (TWICE_DATABASE_URL, exploration budgets).
//
// No secret reaches what twice prints or writes: every connection
// setting it or its adapters read (TWICE_DATABASE_URL, TWICE_REDIS_URL,
// TWICE_KAFKA_BROKERS, PGPASSWORD, and any TWICE_ variable named like a
// URL, DSN, broker list, key, token, secret or password, from the
// environment or a -twice flag) is shown without its password, or not
// at all when it does not parse, and its secrets are masked (xxxxx) in
// the output and every report file, whatever printed them (see
// internal/redact).
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
// The replay lines twice prints say go run
// github.com/runtwice/twice/cmd/twice replay when twice ran through go
// run.
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
//
// # twice version
//
// Version prints the twice version of the command: its module version
// and the commit it was built from. It and twice help answer at once,
// inside a module or not; every other command runs twice-core.
//
// # In CI
//
// In GitHub Actions, with a PostgreSQL service:
//
//	jobs:
//	  idempotency:
//	    runs-on: ubuntu-latest
//	    services:
//	      postgres:
//	        image: postgres:16
//	        env: { POSTGRES_PASSWORD: postgres }
//	        ports: ["5432:5432"]
//	        options: --health-cmd pg_isready --health-interval 2s --health-retries 30
//	    env:
//	      TWICE_DATABASE_URL: postgres://postgres:postgres@localhost:5432/postgres?sslmode=disable
//	    steps:
//	      - uses: actions/checkout@v4
//	      - uses: actions/setup-go@v5
//	        with: { go-version-file: go.mod }
//	      # summary.md goes to the job summary by itself ($GITHUB_STEP_SUMMARY)
//	      - run: go run github.com/runtwice/twice/cmd/twice report ./...
//	      - uses: actions/upload-artifact@v4
//	        if: always()
//	        with: { name: twice-report, path: twice-report/ }
//
// Split across three machines, dealt by the last merged report's timings
// (kept in the Actions cache; the first run, without them, deals in turn):
//
//	jobs:
//	  plan:
//	    runs-on: ubuntu-latest
//	    outputs: { matrix: "${{ steps.plan.outputs.matrix }}" }
//	    steps:
//	      - uses: actions/checkout@v4
//	      - uses: actions/setup-go@v5
//	        with: { go-version-file: go.mod }
//	      - uses: actions/cache/restore@v4
//	        with: { path: twice-timings, key: "twice-timings-${{ github.sha }}", restore-keys: twice-timings- }
//	      - id: plan
//	        run: |
//	          timings=$([ -f twice-timings/report.json ] && echo "-timings twice-timings" || true)
//	          echo "matrix=$(go run github.com/runtwice/twice/cmd/twice plan -shards 3 $timings)" >> "$GITHUB_OUTPUT"
//	  idempotency:
//	    needs: plan
//	    runs-on: ubuntu-latest
//	    strategy: { fail-fast: false, matrix: "${{ fromJSON(needs.plan.outputs.matrix) }}" }
//	    services:
//	      postgres:
//	        image: postgres:16
//	        env: { POSTGRES_PASSWORD: postgres }
//	        ports: ["5432:5432"]
//	        options: --health-cmd pg_isready --health-interval 2s --health-retries 30
//	    env:
//	      TWICE_DATABASE_URL: postgres://postgres:postgres@localhost:5432/postgres?sslmode=disable
//	    steps:
//	      - uses: actions/checkout@v4
//	      - uses: actions/setup-go@v5
//	        with: { go-version-file: go.mod }
//	      - uses: actions/cache/restore@v4
//	        with: { path: twice-timings, key: "twice-timings-${{ github.sha }}", restore-keys: twice-timings- }
//	      - run: |
//	          timings=$([ -f twice-timings/report.json ] && echo "-timings twice-timings" || true)
//	          go run github.com/runtwice/twice/cmd/twice report -shard ${{ matrix.shard }} $timings -o report-${{ matrix.index }} ./...
//	      - uses: actions/upload-artifact@v4
//	        if: always()
//	        with: { name: "twice-report-${{ matrix.index }}", path: "report-${{ matrix.index }}/" }
//	  report:
//	    needs: idempotency
//	    if: always()
//	    runs-on: ubuntu-latest
//	    steps:
//	      - uses: actions/checkout@v4
//	      - uses: actions/setup-go@v5
//	        with: { go-version-file: go.mod }
//	      - uses: actions/download-artifact@v4
//	        with: { pattern: twice-report-*, path: shards }
//	      - run: go run github.com/runtwice/twice/cmd/twice report -merge -o twice-timings shards/*/report.json
//	      - uses: actions/cache/save@v4
//	        if: always()
//	        with: { path: twice-timings, key: "twice-timings-${{ github.sha }}" }
//
// In GitLab CI, parallel: gives each job its shard (CI_NODE_INDEX,
// CI_NODE_TOTAL), which twice reads by itself:
//
//	idempotency:
//	  parallel: 3
//	  services: [postgres:16]
//	  variables:
//	    POSTGRES_PASSWORD: postgres
//	    TWICE_DATABASE_URL: postgres://postgres:postgres@postgres:5432/postgres?sslmode=disable
//	  cache: { key: twice-timings, paths: [twice-timings/], policy: pull }
//	  script:
//	    - timings=$([ -f twice-timings/report.json ] && echo "-timings twice-timings" || true)
//	    - go run github.com/runtwice/twice/cmd/twice report $timings -o report-$CI_NODE_INDEX ./...
//	  artifacts: { when: always, paths: [report-*/] }
//
//	idempotency-report:
//	  needs: [idempotency]
//	  when: always
//	  cache: { key: twice-timings, paths: [twice-timings/], policy: push, when: always }
//	  script:
//	    - go run github.com/runtwice/twice/cmd/twice report -merge -o twice-timings report-*/report.json
//	  artifacts: { when: always, paths: [twice-timings/] }
//
// A finding in CI reruns alone on your machine: download the merged
// report.json and run twice report -rerun-failed report.json.
//
// # How it runs
//
// This command is a launcher of the standard library alone, so that `go
// run ./cmd/twice` on an empty build cache compiles little before it
// speaks. What it runs is cmd/twice/twice-core, the twice command proper,
// which it builds with the go command of the module it runs in (so the
// report is read by the same twice version that wrote the records) into
// the user cache directory, once per module; while that build runs it
// says how many packages it compiled. It passes its arguments, streams
// and exit code through, and SIGINT or SIGTERM on to it. $TWICE_CORE
// names a prebuilt twice-core instead, for a machine that cannot build one
// (go build -o twice-core github.com/runtwice/twice/cmd/twice/twice-core).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/runtwice/twice/cmd/twice/internal/about"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/gobuild"
)

const (
	corePkg = "github.com/runtwice/twice/cmd/twice/twice-core"
	coreEnv = "TWICE_CORE"
)

func main() {
	os.Exit(launch(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// launch builds twice-core and runs it with args and the streams, and
// returns its exit code, or 2 when it could not run it.
func launch(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// Answered here, before any build: they need no module, and outside
	// one there is no twice-core to build.
	if len(args) == 0 {
		_, _ = fmt.Fprint(stderr, about.Usage)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		_, _ = fmt.Fprint(stdout, about.Usage)
		return 0
	case "version", "-version", "--version":
		_, _ = fmt.Fprint(stdout, about.VersionLine())
		return 0
	}
	l := &launcher{sigs: make(chan os.Signal, 4)}
	// Caught from the start, so that no signal falls between the build
	// and the run and kills the launcher alone.
	signal.Notify(l.sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(l.sigs)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	l.cancel = cancel
	go l.relay()

	wd, err := os.Getwd()
	if err != nil {
		sayErr(stderr, fmt.Errorf("working directory: %w", err))
		return 2
	}
	core := gobuild.Helper{
		Pkg:      corePkg,
		Name:     "twice-core",
		Env:      coreEnv,
		What:     "twice-core",
		Need:     "twice runs " + corePkg + ", built in the module it runs in (one that requires github.com/runtwice/twice)",
		Building: "building twice itself, " + corePkg + " (the reports, their diffs and diagrams; once per build cache)",
		Progress: stderr,
		// Before its build, nothing of twice has spoken yet; an up-to-date
		// one takes a tenth of that.
		After: 500 * time.Millisecond,
	}
	path, err := core.Path(ctx, wd)
	if errors.Is(err, gobuild.ErrNoGo) {
		say(stderr, "no go command on PATH: twice runs go test, and builds %s with go (put go on PATH; %s names a prebuilt one)", corePkg, coreEnv)
		return 2
	}
	if err != nil {
		if sig := l.interrupted(); sig != nil {
			say(stderr, "interrupted by %s while building %s: nothing ran", sig, corePkg)
			return 2
		}
		sayErr(stderr, err)
		return 2
	}

	cmd := exec.Command(path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	// The replay lines twice-core prints name twice as the user ran it.
	var pkg string
	if info, ok := debug.ReadBuildInfo(); ok {
		pkg = info.Path
	}
	cmd.Env = append(os.Environ(), about.CommandEnv+"="+about.Invocation(os.Args[0], pkg))
	cmd.SysProcAttr = coreAttr()
	if err := l.start(cmd); err != nil {
		sayErr(stderr, fmt.Errorf("start %s: %w (unset %s, or rebuild it: go build -o %s %s)", path, err, coreEnv, path, corePkg))
		return 2
	}
	err = cmd.Wait()
	l.finish()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode()
	}
	sayErr(stderr, fmt.Errorf("%s ended without an exit code (%w): no report was written; its temporary files are removed by the next run", path, err))
	return 2
}

// launcher passes the signals it catches on to twice-core once it runs;
// before that, the first one stops the build.
type launcher struct {
	sigs   chan os.Signal
	cancel context.CancelCauseFunc

	mu     sync.Mutex
	core   *os.Process
	caught os.Signal
	ended  bool
}

func (l *launcher) relay() {
	for sig := range l.sigs {
		l.mu.Lock()
		switch {
		case l.ended:
		case l.core != nil:
			_ = l.core.Signal(sig)
		default:
			if l.caught == nil {
				l.caught = sig
			}
			l.cancel(fmt.Errorf("interrupted by %s", sig))
		}
		l.mu.Unlock()
	}
}

// start starts cmd, and passes it a signal caught since the build ended.
func (l *launcher) start(cmd *exec.Cmd) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	l.core = cmd.Process
	if l.caught != nil {
		_ = l.core.Signal(l.caught)
	}
	return nil
}

func (l *launcher) interrupted() os.Signal {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.caught
}

// finish stops the relay to a process that has ended.
func (l *launcher) finish() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended = true
}

// say prints a line of the launcher's output, tagged (blame.Line); the
// core it runs tags its own.
func say(w io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintln(w, blame.Line(format, args...))
}

// sayErr prints err as the user reads it: tagged, with the label of whose
// fault it is (blame.Message).
func sayErr(w io.Writer, err error) {
	_, _ = fmt.Fprintln(w, blame.Message(err))
}
