package wireproxy

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSweepSockDirs: the socket directories of dead runs go, those of live
// ones (and every other name) stay.
func TestSweepSockDirs(t *testing.T) {
	base := t.TempDir()
	// A run that is gone: a process that ran and was killed.
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	deadPid, deadStart := child.Process.Pid, procStart(child.Process.Pid)
	_ = child.Process.Kill()
	_ = child.Wait()
	me, myStart := os.Getpid(), procStart(os.Getpid())
	if myStart == "" {
		t.Skip("no /proc on this machine: start times are unknown")
	}
	old := time.Now().Add(-2 * ownerlessAge)

	mkdir := func(name string, oldMtime bool) string {
		t.Helper()
		dir := filepath.Join(base, name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ".s.PGSQL.5432"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if oldMtime {
			if err := os.Chtimes(dir, old, old); err != nil {
				t.Fatal(err)
			}
		}
		return name
	}
	pidDir := func(pid int, start string) string {
		return sockDirPrefix + strconv.Itoa(pid) + "-" + start + "-1234"
	}
	gone := []string{
		mkdir(pidDir(deadPid, deadStart), false),
		mkdir(pidDir(me, "1"), false), // a reused pid: another process had it
		mkdir(sockDirPrefix+"111111", true),
	}
	stay := []string{
		mkdir(pidDir(me, myStart), true),
		mkdir(sockDirPrefix+"222222", false), // too young to judge: it may not listen yet
		mkdir("twice-pg-333333", true),
		mkdir("other-proxy-1-1-1", true),
	}
	// An older twice's directory, no owner in its name, whose proxy still
	// listens.
	listening := sockDirPrefix + "444444"
	if err := os.Mkdir(filepath.Join(base, listening), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(base, listening, ".s.PGSQL.5432"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Chtimes(filepath.Join(base, listening), old, old); err != nil {
		t.Fatal(err)
	}
	stay = append(stay, listening)

	sweepSockDirs(base)
	for _, name := range gone {
		if _, err := os.Stat(filepath.Join(base, name)); !os.IsNotExist(err) {
			t.Errorf("%s is still there (stat: %v), want it removed", name, err)
		}
	}
	for _, name := range stay {
		if _, err := os.Stat(filepath.Join(base, name)); err != nil {
			t.Errorf("%s was removed (%v), want it kept", name, err)
		}
	}
}

// TestSockDirNamesItsOwner: a proxy's socket directory names this process,
// as the sweep reads it.
func TestSockDirNamesItsOwner(t *testing.T) {
	p, err := Listen(Config{Label: "d1", Upstream: "host=/nonexistent dbname=x user=u", UnixSocket: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	name := filepath.Base(p.sockDir)
	pid, start, ok := parseOwner(name)
	if !ok || pid != os.Getpid() || start != procStart(os.Getpid()) {
		t.Errorf("socket directory %s: owner %d %q (ok %v), want this process %d %q", name, pid, start, ok, os.Getpid(), procStart(os.Getpid()))
	}
	if !strings.HasPrefix(name, sockDirPrefix) || isLeftover(p.sockDir, name) {
		t.Errorf("this process's own directory %s counts as a leftover", name)
	}
}
