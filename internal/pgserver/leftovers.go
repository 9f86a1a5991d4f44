package pgserver

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ownerlessAge is how old a cluster directory without an owner file must
// be before it counts as a leftover: its maker writes the file right after
// creating it, so only a crash in between leaves one without.
const ownerlessAge = 10 * time.Minute

// sweepRunDirs removes the local clusters under base that a killed run
// left: those whose owner process, on this host, is gone. A postgres still
// running in one (its watchdog was killed too) is shut down first.
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
		if !isLeftover(dir) {
			continue
		}
		data := filepath.Join(dir, "data")
		if pm, ok := postmasterOf(data); ok {
			stopPostmaster(pm, 10*time.Second)
		}
		_ = os.RemoveAll(dir)
	}
}

// isLeftover reports whether the directory's owner is gone; another host's
// directories (a shared /tmp) and other users' are never ours to judge.
func isLeftover(dir string) bool {
	st, err := os.Stat(dir)
	if err != nil || !ownedByMe(st) {
		return false
	}
	owner, sameHost, err := readOwner(filepath.Join(dir, "owner"))
	if err != nil {
		return os.IsNotExist(err) && time.Since(st.ModTime()) > ownerlessAge
	}
	return sameHost && !owner.alive()
}

// postmasterOf returns the postmaster running on data, if one does: the pid
// in postmaster.pid, confirmed by the process's working directory (a
// postmaster chdirs into its data directory) so a reused pid is never
// signalled.
func postmasterOf(data string) (procRef, bool) {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return procRef{}, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return procRef{}, false
	}
	cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	if err != nil {
		return procRef{}, false
	}
	want, err := filepath.EvalSymlinks(data)
	if err != nil || filepath.Clean(cwd) != want {
		return procRef{}, false
	}
	return refOf(pid), true
}

// sweepCacheTemps removes the temp dirs of cache builds whose process is
// gone.
func sweepCacheTemps(root string) {
	matches, _ := filepath.Glob(filepath.Join(root, "tmp-*"))
	for _, dir := range matches {
		if isLeftover(dir) {
			_ = os.RemoveAll(dir)
		}
	}
}

// ownedByMe reports whether this process's user owns the file, so a sweep
// never touches another user's leftovers in a shared directory.
func ownedByMe(st os.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	if os.Geteuid() == 0 {
		return true // root hands its cluster dirs to the server's user
	}
	return int(sys.Uid) == os.Geteuid()
}
