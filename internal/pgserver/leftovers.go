package pgserver

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/runtwice/twice/internal/owner"
)

// ownerlessAge is how old a cluster directory without an owner file must
// be before it counts as a leftover: its maker writes the file right after
// creating it, so only a crash in between leaves one without.
const ownerlessAge = 10 * time.Minute

// leftoverRules judge the directories this package marks: as root it
// hands its clusters to the server's account, and a directory without an
// owner file is a leftover once it is old enough.
var leftoverRules = owner.Rules{
	RootJudgesAll: true,
	Unmarked:      func(st os.FileInfo) bool { return time.Since(st.ModTime()) > ownerlessAge },
}

// sweepRunDirs removes the local clusters under base that a killed run
// left: those whose owner process, on this host, is gone. A postgres still
// running in one (its watchdog was killed too) is shut down first.
func sweepRunDirs(base string) {
	for _, dir := range owner.Leftovers(base, runDirPrefix, leftoverRules) {
		data := filepath.Join(dir, "data")
		if pm, ok := postmasterOf(data); ok {
			stopPostmaster(pm, 10*time.Second)
		}
		_ = os.RemoveAll(dir)
	}
}

// postmasterOf returns the postmaster running on data, if one does: the pid
// in postmaster.pid, confirmed by the process's working directory (a
// postmaster chdirs into its data directory) so a reused pid is never
// signalled.
func postmasterOf(data string) (owner.Process, bool) {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return owner.Process{}, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return owner.Process{}, false
	}
	cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	if err != nil {
		return owner.Process{}, false
	}
	want, err := filepath.EvalSymlinks(data)
	if err != nil || filepath.Clean(cwd) != want {
		return owner.Process{}, false
	}
	return owner.Of(pid), true
}

// sweepCacheTemps removes the temp dirs of cache builds whose process is
// gone.
func sweepCacheTemps(root string) {
	for _, dir := range owner.Leftovers(root, "tmp-", leftoverRules) {
		_ = os.RemoveAll(dir)
	}
}
