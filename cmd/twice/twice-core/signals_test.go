package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runtwice/twice/internal/owner"
)

// runMainEnv makes this test binary run twice's main instead of its
// tests, so a test can signal a real twice process.
const runMainEnv = "TWICE_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// blockedRun is twice report running ./testdata/blocking as a process of
// its own, its check waiting in its handler. Every process it starts
// carries mark in its environment; its temporary directory is tmp.
type blockedRun struct {
	cmd            *exec.Cmd
	stderr         bytes.Buffer
	tmp, mark      string
	release        string
	out            string   // its -o
	clusters       []string // the local clusters its test binary started
	exited         chan struct{}
	exitCode       int
	startedRunDirs []string
}

func startBlockedRun(t *testing.T) *blockedRun {
	t.Helper()
	files := t.TempDir()
	b := &blockedRun{tmp: t.TempDir(), mark: randomHex(t), release: filepath.Join(files, "release"), out: filepath.Join(files, "twice-report"), exited: make(chan struct{})}
	started := filepath.Join(files, "started")
	b.cmd = exec.Command(os.Args[0], "report", "-o", b.out, "./testdata/blocking")
	b.cmd.Env = append(os.Environ(), runMainEnv+"=1", "TMPDIR="+b.tmp, "TWICE_TEST_MARK="+b.mark,
		"TWICE_TEST_STARTED="+started, "TWICE_TEST_RELEASE="+b.release, "TWICE_POSTGRES=local")
	b.cmd.Stderr = &b.stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = b.cmd.Wait()
		b.exitCode = b.cmd.ProcessState.ExitCode()
		close(b.exited)
	}()
	t.Cleanup(func() {
		_ = os.WriteFile(b.release, nil, 0o644)
		_ = b.cmd.Process.Kill()
		<-b.exited
		for _, pid := range markedProcesses(b.mark) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	// Building the test binary on a cold cache takes minutes.
	if !poll(5*time.Minute, func() bool { _, err := os.Stat(started); return err == nil }) {
		t.Fatalf("the check never started its handler; twice said:\n%s", b.stderr.String())
	}
	b.clusters = clustersOf(b.mark)
	b.startedRunDirs, _ = filepath.Glob(filepath.Join(b.tmp, runDirPrefix+"*"))
	// Mid-run, the checks below can see what they look for: else they
	// would prove nothing.
	if len(markedProcesses(b.mark)) < 3 || len(b.clusters) != 1 || len(b.startedRunDirs) != 1 {
		t.Fatalf("mid-run: %d processes of the run (want go test, its test binary, postgres...), clusters %q, run dirs %q",
			len(markedProcesses(b.mark)), b.clusters, b.startedRunDirs)
	}
	return b
}

// TestSignalStopsTheRun: SIGTERM or SIGINT to twice mid-check stops go
// test, the test binary and its PostgreSQL, removes the run's files and
// exits 2 saying so.
func TestSignalStopsTheRun(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(signalName(sig), func(t *testing.T) {
			b := startBlockedRun(t)
			if err := b.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-b.exited:
			case <-time.After(time.Minute):
				t.Fatalf("twice still runs a minute after %s", signalName(sig))
			}
			if b.exitCode != 2 {
				t.Errorf("exit code = %d, want 2", b.exitCode)
			}
			if want := "[twice] interrupted by " + signalName(sig); !strings.Contains(b.stderr.String(), want) {
				t.Errorf("stderr lacks %q:\n%s", want, b.stderr.String())
			}
			var procs []int
			var left []string
			clean := poll(5*time.Second, func() bool {
				procs = markedProcesses(b.mark)
				left = leftIn(b.tmp, b.clusters)
				return len(procs) == 0 && len(left) == 0
			})
			if !clean {
				t.Errorf("5 s after twice exited, processes %v of the run still run (%s) and %q are left", procs, describe(procs), left)
			}
		})
	}
}

// TestSweepAfterKill: a SIGKILLed twice cannot clean up; the next run
// removes its run directory, go's build directories in it included, and
// nothing else: not a live run's, not a directory without an owner file.
func TestSweepAfterKill(t *testing.T) {
	b := startBlockedRun(t)
	if err := b.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-b.exited
	killed := b.startedRunDirs[0]
	if _, err := os.Stat(killed); err != nil {
		t.Fatalf("the killed run's directory is gone before any sweep (%v): the test would prove nothing", err)
	}
	// The blocked handler returns, and the orphaned test binary dies at
	// its next write to the go test that died with twice.
	if err := os.WriteFile(b.release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var procs []int
	if !poll(time.Minute, func() bool { procs = markedProcesses(b.mark); return len(procs) == 0 }) {
		t.Errorf("a minute after twice was killed, processes %v of its run still run (%s)", procs, describe(procs))
	}

	host, _ := os.Hostname()
	decoys := map[string]string{
		"live":      owner.Self().String() + " " + host + "\n",
		"otherhost": fmt.Sprintf("%d %s %s\n", 1<<22-1, "1", "not-"+host),
		"noowner":   "",
	}
	for name, marker := range decoys {
		dir := filepath.Join(b.tmp, runDirPrefix+name)
		if err := os.MkdirAll(filepath.Join(dir, "records"), 0o755); err != nil {
			t.Fatal(err)
		}
		if marker != "" {
			if err := os.WriteFile(filepath.Join(dir, owner.File), []byte(marker), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Setenv("TMPDIR", b.tmp)
	var stdout, stderr bytes.Buffer
	run([]string{"report", "-o", filepath.Join(t.TempDir(), "r"), "./testdata/plain"}, &stdout, &stderr)
	if _, err := os.Stat(killed); err == nil {
		t.Errorf("the next run left the killed run's directory %s", killed)
	}
	for name := range decoys {
		if _, err := os.Stat(filepath.Join(b.tmp, runDirPrefix+name)); err != nil {
			t.Errorf("the next run removed %s%s, which is not a dead run's: %v", runDirPrefix, name, err)
		}
	}
}

// markedProcesses are the processes whose environment holds
// TWICE_TEST_MARK=mark.
func markedProcesses(mark string) []int {
	entries, _ := os.ReadDir("/proc")
	want := []byte("TWICE_TEST_MARK=" + mark + "\x00")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(env, want) {
			if st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); bytes.Contains(st, []byte(") Z ")) {
				continue // a zombie: dead, waiting for its parent
			}
			out = append(out, pid)
		}
	}
	return out
}

// clustersOf are the local clusters' directories whose postgres belongs
// to the run marked mark.
func clustersOf(mark string) []string {
	var out []string
	for _, pid := range markedProcesses(mark) {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		if filepath.Base(exe) == "postgres" && strings.Contains(cwd, "twice-pg-") {
			out = append(out, cwd)
		}
	}
	return dedupeStrings(out)
}

func dedupeStrings(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// leftIn lists what is left in tmp, and which of the clusters still exist.
func leftIn(tmp string, clusters []string) []string {
	var out []string
	entries, _ := os.ReadDir(tmp)
	for _, e := range entries {
		out = append(out, filepath.Join(tmp, e.Name()))
	}
	for _, c := range clusters {
		if _, err := os.Stat(c); err == nil {
			out = append(out, c)
		}
	}
	return out
}

func describe(pids []int) string {
	var names []string
	for _, pid := range pids {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		names = append(names, strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " "))
	}
	return strings.Join(names, "; ")
}

// poll calls ok until it returns true or within has passed.
func poll(within time.Duration, ok func() bool) bool {
	for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		if ok() {
			return true
		}
		if time.Now().After(deadline) {
			return ok()
		}
	}
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
