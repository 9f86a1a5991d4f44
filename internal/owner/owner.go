// Package owner marks the directories a process makes with the process
// that made them, so that a later run can find and remove the ones a
// killed process (SIGKILL gives no chance to clean up) left, and never a
// live process's.
//
// A marker is the file named [File] in the directory: one line
// "PID START HOST", where START is the process's start time in clock
// ticks since boot (field 22 of /proc/PID/stat, "-" where unknown), so a
// PID reused by a later process does not pass for the owner. A marker
// naming another host (a shared /tmp) is never judged: its processes
// cannot be seen from here.
//
// The runner (cmd/twice) marks its run directories and internal/pgserver
// its local clusters and cache temp directories; each sweeps its own
// prefix with [Leftovers].
package owner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// File is the name of the marker in a marked directory.
const File = "owner"

// A Process names one process and tells it apart from a later process
// that reuses its PID.
type Process struct {
	PID int
	// Start is the start time in clock ticks since boot; "" where unknown
	// (no /proc, or the process has finished and is a zombie).
	Start string
}

// Self is this process.
func Self() Process { return Of(os.Getpid()) }

// Of is process pid as it is now.
func Of(pid int) Process { return Process{PID: pid, Start: procStart(pid)} }

// String is "PID START", START "-" where unknown: the form [Parse] reads.
func (p Process) String() string {
	start := p.Start
	if start == "" {
		start = "-"
	}
	return fmt.Sprintf("%d %s", p.PID, start)
}

// Parse reads a process from the first two fields of s, as [Process.String]
// writes them; false when s does not start with a PID.
func Parse(s string) (Process, bool) {
	f := strings.Fields(s)
	if len(f) < 2 {
		return Process{}, false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return Process{}, false
	}
	start := f[1]
	if start == "-" {
		start = ""
	}
	return Process{PID: pid, Start: start}, true
}

// Alive reports whether p still runs, and is not a later process that got
// its PID. A zombie has finished: it only waits to be reaped.
func (p Process) Alive() bool {
	if err := syscall.Kill(p.PID, 0); err != nil && err != syscall.EPERM {
		return false
	}
	now := procStart(p.PID)
	if p.Start == "" {
		// No /proc: kill(0) is all we know. With /proc, a zombie reads "".
		_, err := os.Stat("/proc/self/stat")
		return err != nil || now != ""
	}
	return now == p.Start
}

// procStart reads field 22 of /proc/PID/stat, when the process started;
// "" where there is no /proc or the process is a zombie.
func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name (field 2) may hold spaces and parentheses: skip
	// past its last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 || f[0] == "Z" {
		return ""
	}
	return f[19]
}

// Mark writes dir's marker, naming this process on this host.
func Mark(dir string) error {
	host, _ := os.Hostname()
	return os.WriteFile(filepath.Join(dir, File), []byte(fmt.Sprintf("%s %s\n", Self(), host)), 0o644)
}

// Read returns the process dir's marker names and whether it ran on this
// host. Without a marker the error satisfies errors.Is(err, fs.ErrNotExist).
func Read(dir string) (p Process, here bool, err error) {
	path := filepath.Join(dir, File)
	b, err := os.ReadFile(path)
	if err != nil {
		return Process{}, false, err
	}
	p, ok := Parse(string(b))
	if !ok {
		return Process{}, false, fmt.Errorf("malformed owner file %s", path)
	}
	f := strings.Fields(string(b))
	host, _ := os.Hostname()
	return p, len(f) >= 3 && f[2] == host, nil
}

// Rules says which directories [Leftovers] may judge beyond the default:
// this user's directories whose marker names a process on this host that
// is gone. The zero value is that default.
type Rules struct {
	// RootJudgesAll lets a process running as root judge the directories
	// of every user: internal/pgserver hands its clusters to the server's
	// account.
	RootJudgesAll bool
	// Unmarked reports whether a directory without a marker is a leftover
	// (internal/pgserver: one older than its maker needs to write the
	// marker). Nil: never.
	Unmarked func(fs.FileInfo) bool
}

// Leftovers lists the directories under base, named prefix followed by
// anything, whose owner is gone. Another host's directories and those with
// a malformed marker are never listed; other users' and unmarked ones only
// as r allows.
func Leftovers(base, prefix string, r Rules) []string {
	entries, err := os.ReadDir(base)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		if dir := filepath.Join(base, e.Name()); r.isLeftover(dir) {
			out = append(out, dir)
		}
	}
	return out
}

func (r Rules) isLeftover(dir string) bool {
	st, err := os.Stat(dir)
	if err != nil || !r.mayJudge(st) {
		return false
	}
	p, here, err := Read(dir)
	if err != nil {
		return errors.Is(err, fs.ErrNotExist) && r.Unmarked != nil && r.Unmarked(st)
	}
	return here && !p.Alive()
}

// mayJudge keeps a sweep off another user's directories in a shared
// directory.
func (r Rules) mayJudge(st fs.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	if r.RootJudgesAll && os.Geteuid() == 0 {
		return true
	}
	return int(sys.Uid) == os.Geteuid()
}
