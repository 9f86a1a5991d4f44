package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A run directory holds everything one twice run creates on disk: the
// harness's records and go's own temporary build directories (GOTMPDIR).
// Its owner file names the process that made it, by PID and start time,
// so the next run removes the directories a killed run left (SIGKILL
// gives no chance to clean up) and never a live run's, nor anything it
// did not make: a directory with the prefix but no owner file is not
// twice's to judge.
const (
	runDirPrefix = "twice-run-"
	ownerFile    = "owner"
)

// runDir is one run's directory.
type runDir struct {
	path string
}

// records is where the harness writes its records (record.DirEnv).
func (d runDir) records() string { return filepath.Join(d.path, "records") }

// goTmp is go's GOTMPDIR: go test's go-build* directories, which a
// killed go test leaves behind.
func (d runDir) goTmp() string { return filepath.Join(d.path, "go") }

// newRunDir sweeps what killed runs left in the temporary directory and
// makes this run's directory, owned by this process.
func newRunDir() (runDir, error) {
	sweepRunDirs(os.TempDir())
	path, err := os.MkdirTemp("", runDirPrefix+"*")
	if err != nil {
		return runDir{}, fmt.Errorf("[twice] internal: cannot make a directory for the run: %w", err)
	}
	d := runDir{path: path}
	host, _ := os.Hostname()
	marker := fmt.Sprintf("%d %s %s\n", os.Getpid(), procStart(os.Getpid()), host)
	for _, step := range []func() error{
		func() error { return os.WriteFile(filepath.Join(path, ownerFile), []byte(marker), 0o644) },
		func() error { return os.Mkdir(d.records(), 0o755) },
		func() error { return os.Mkdir(d.goTmp(), 0o755) },
	} {
		if err := step(); err != nil {
			d.remove()
			return runDir{}, fmt.Errorf("[twice] internal: cannot make a directory for the run: %w", err)
		}
	}
	return d, nil
}

// remove drops the run's directory. go test removes its own build
// directories when it exits; anything left in it goes too.
func (d runDir) remove() { _ = os.RemoveAll(d.path) }

// sweepRunDirs removes the run directories under base whose owner, on
// this host, is gone.
func sweepRunDirs(base string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), runDirPrefix) {
			continue
		}
		dir := filepath.Join(base, e.Name())
		if runDirIsLeftover(dir) {
			_ = os.RemoveAll(dir)
		}
	}
}

// runDirIsLeftover reports whether dir was made by a twice run on this
// host, as this user, that is no longer running.
func runDirIsLeftover(dir string) bool {
	st, err := os.Stat(dir)
	if err != nil {
		return false
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != os.Geteuid() {
		return false
	}
	b, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	host, _ := os.Hostname()
	if len(f) != 3 || f[2] != host {
		return false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return false
	}
	return !processAlive(pid, f[1])
}

// processAlive reports whether process pid runs and started at start
// (clock ticks since boot, as procStart reads it): a PID reused by
// another process is not the owner.
func processAlive(pid int, start string) bool {
	if err := syscall.Kill(pid, 0); err != nil && err != syscall.EPERM {
		return false
	}
	now := procStart(pid)
	if start == "-" || now == "-" {
		// No /proc (macOS): that the PID runs is all we know.
		return true
	}
	return now == start
}

// procStart is process pid's start time in clock ticks since boot (field
// 22 of /proc/PID/stat), or "-" where there is no /proc.
func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "-"
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "-"
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); the start time is field 22.
	if len(f) < 20 {
		return "-"
	}
	return f[19]
}
