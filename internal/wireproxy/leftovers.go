package wireproxy

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/runtwice/twice/internal/owner"
)

// sockDirPrefix starts the name of every unix-socket directory a proxy
// makes: twice-proxy-<pid>-<start>-<random>, where pid and start (the
// process's start time from /proc, "x" where unknown) name the process that
// owns it, so a later run can tell a dead run's directory from a live one.
const sockDirPrefix = "twice-proxy-"

// ownerlessAge is how old a directory without a readable owner must be
// before it counts as a leftover: a proxy listens right after making it.
const ownerlessAge = 10 * time.Minute

var sweepOnce sync.Once

// sockDirPattern is the MkdirTemp pattern of this process's directories.
func sockDirPattern() string {
	return fmt.Sprintf("%s%d-%s-", sockDirPrefix, os.Getpid(), orX(procStart(os.Getpid())))
}

// sweepSockDirs removes the socket directories under base that runs killed
// before their Close (SIGKILL, ^C) left: those whose owner process is gone.
// Another user's directories are never touched, and neither is one whose
// owner lives or whose socket still answers.
func sweepSockDirs(base string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), sockDirPrefix) {
			continue
		}
		dir := filepath.Join(base, e.Name())
		if isLeftover(dir, e.Name()) {
			_ = os.RemoveAll(dir)
		}
	}
}

func isLeftover(dir, name string) bool {
	st, err := os.Lstat(dir)
	if err != nil || !st.IsDir() {
		return false
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != os.Geteuid() {
		return false
	}
	if pid, start, ok := parseOwner(name); ok {
		return !alive(pid, start)
	}
	// A directory of an older twice, with no owner in its name: a leftover
	// when no process has its socket bound any more. Asked of the kernel,
	// not by dialing, which would hand a live proxy a stray client.
	bound, ok := boundUnixSockets()
	if !ok {
		return time.Since(st.ModTime()) > ownerlessAge
	}
	return !bound[filepath.Join(dir, ".s.PGSQL.5432")] && time.Since(st.ModTime()) > time.Minute
}

// boundUnixSockets lists the paths of the unix sockets bound on this
// machine, from /proc/net/unix; false where that cannot be read.
func boundUnixSockets() (map[string]bool, bool) {
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return nil, false
	}
	paths := map[string]bool{}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) >= 8 && strings.HasPrefix(f[7], "/") {
			paths[f[7]] = true
		}
	}
	return paths, true
}

// parseOwner reads pid and start time from a name twice-proxy-<pid>-<start>-...
func parseOwner(name string) (int, string, bool) {
	f := strings.SplitN(strings.TrimPrefix(name, sockDirPrefix), "-", 3)
	if len(f) < 3 {
		return 0, "", false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return 0, "", false
	}
	if f[1] == "x" {
		return pid, "", true
	}
	if _, err := strconv.ParseUint(f[1], 10, 64); err != nil {
		return 0, "", false
	}
	return pid, f[1], true
}

// alive reports whether process pid runs and, where its start time is
// known, is the same process (not a reused pid). The same judgement
// internal/pgserver makes of its clusters' owners.
func alive(pid int, start string) bool {
	if err := syscall.Kill(pid, 0); err != nil && err != syscall.EPERM {
		return false
	}
	if start == "" {
		return true
	}
	return procStart(pid) == start
}

// procStart is when process pid started; "" where there is no /proc or
// the process has finished (a zombie).
func procStart(pid int) string { return owner.Of(pid).Start }

func orX(s string) string {
	if s == "" {
		return "x"
	}
	return s
}
