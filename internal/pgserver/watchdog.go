package pgserver

// The watchdog makes "stopped when the test binary exits" hold when the
// binary cannot clean up itself: it is killed (SIGKILL, go test's timeout),
// it panics, or nobody calls Close (Shared's server never is).
//
// It is a re-exec of os.Executable() that this package's init() turns into
// the watchdog when watchdogEnv is set. Not a `sh` script: removing a
// container needs the Docker helper (cmd/twice-pgdocker), and checking that a pid still names the process we started (not a
// reused pid) is easier to get right in Go. It starts off the critical
// path: the test process does not wait for it.
//
// Protocol: the watchdog's stdin is the read end of a pipe whose write end
// only the test process holds (os.Pipe is close-on-exec, so no other child
// inherits it). The test process writes one line per resource:
//
//	dbs <prefix> <quoted conn> one run's databases to drop (see DropOnExit)
//	proc <pid> <start>         a postgres postmaster to stop (fast shutdown)
//	dir <path>                 a directory to remove
//	container <id> <helper>    a Docker container to remove with cmd/twice-pgdocker
//
// When the test process exits for any reason the kernel closes the write
// end; the watchdog reads EOF, releases everything it was told about in the
// order above (databases first, while their server still runs), and exits.
// A connection string, which may hold a password, only ever travels through
// the pipe. It ignores SIGINT/SIGTERM/SIGHUP and runs in its own process group
// so a ^C meant for `go test` does not kill it before its work is done.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/runtwice/twice/internal/owner"
)

const watchdogEnv = "TWICE_PGSERVER_WATCHDOG"

func init() {
	if os.Getenv(watchdogEnv) == "1" {
		runWatchdog()
		os.Exit(0)
	}
}

func runWatchdog() {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	var procs []owner.Process
	var dbs []dbsJob
	var dirs []string
	var containers [][2]string // id, helper
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20) // a connection string may be long
	for sc.Scan() {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		switch kind {
		case "dbs":
			if j, ok := parseDBsLine(rest); ok {
				dbs = append(dbs, j)
			}
		case "proc":
			if p, ok := owner.Parse(rest); ok {
				procs = append(procs, p)
			}
		case "dir":
			dirs = append(dirs, rest)
		case "container":
			if id, helper, ok := strings.Cut(rest, " "); ok {
				containers = append(containers, [2]string{id, helper})
			}
		}
	}
	if len(dbs) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), dropPatience)
		for _, j := range dbs {
			// Nobody reads the watchdog's output; what it misses, a later
			// run's freshdb.CleanStale drops.
			_ = dropRunDatabases(ctx, j.prefix, j.connString, 0)
		}
		cancel()
	}
	for _, p := range procs {
		stopPostmaster(p, 30*time.Second)
	}
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
	if len(containers) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, c := range containers {
			removeContainer(ctx, c[0], c[1])
		}
	}
}

// stopPostmaster asks p for a fast shutdown (SIGINT), then an immediate one
// (SIGQUIT), then kills its process group, and waits until it is gone.
func stopPostmaster(p owner.Process, patience time.Duration) {
	steps := []struct {
		sig   syscall.Signal
		group bool
		wait  time.Duration
	}{
		{syscall.SIGINT, false, patience},
		{syscall.SIGQUIT, false, 5 * time.Second},
		{syscall.SIGKILL, true, 5 * time.Second},
	}
	for _, st := range steps {
		if !p.Alive() {
			return
		}
		if st.group {
			_ = syscall.Kill(-p.PID, st.sig) // postgres runs in its own group (Setpgid)
		}
		_ = syscall.Kill(p.PID, st.sig)
		deadline := time.Now().Add(st.wait)
		for p.Alive() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// watchdog is the test process's end of the pipe.
type watchdog struct {
	mu  sync.Mutex
	w   *os.File
	cmd *exec.Cmd
}

// startWatchdog starts the watchdog process. The caller tells it what to
// release with the watch* methods.
func startWatchdog() (*watchdog, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this test binary to start the cleanup watchdog: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe for the cleanup watchdog: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Stdin = r
	cmd.Dir = "/"
	// It needs no database URL from the environment: DropOnExit sends it.
	cmd.Env = append(filteredEnv("GOCOVERDIR", "TWICE_DATABASE_URL"), watchdogEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = r.Close()
		_ = w.Close()
		return nil, fmt.Errorf("start the cleanup watchdog (%s): %w", exe, err)
	}
	_ = r.Close()
	return &watchdog{w: w, cmd: cmd}, nil
}

func filteredEnv(drop ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		keep := name != watchdogEnv
		for _, d := range drop {
			if name == d {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

func (wd *watchdog) send(line string) error { return wd.sendAs(line, line) }

// sendAs writes line, naming it what in an error (a line may hold a
// password).
func (wd *watchdog) sendAs(line, what string) error {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if wd.w == nil {
		return fmt.Errorf("cleanup watchdog already released")
	}
	if _, err := fmt.Fprintln(wd.w, line); err != nil {
		return fmt.Errorf("tell the cleanup watchdog about %s: %w", what, err)
	}
	return nil
}

func (wd *watchdog) watchProc(p owner.Process) error { return wd.send("proc " + p.String()) }
func (wd *watchdog) watchDir(dir string) error       { return wd.send("dir " + filepath.Clean(dir)) }
func (wd *watchdog) watchContainer(id, helper string) error {
	return wd.send("container " + id + " " + helper)
}

func (wd *watchdog) watchDatabases(prefix, connString string) error {
	return wd.sendAs(dbsLine(prefix, connString), "databases "+prefix+"*")
}

// release closes the pipe and waits for the watchdog to finish its
// cleanup, so nothing is left when it returns.
func (wd *watchdog) release(timeout time.Duration) error {
	wd.mu.Lock()
	w := wd.w
	wd.w = nil
	wd.mu.Unlock()
	if w == nil {
		return nil
	}
	_ = w.Close()
	done := make(chan error, 1)
	go func() { done <- wd.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("cleanup watchdog: %w", err)
		}
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("cleanup watchdog (pid %d) still running after %s", wd.cmd.Process.Pid, timeout)
	}
}
