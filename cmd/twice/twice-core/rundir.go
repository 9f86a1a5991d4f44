package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/runtwice/twice/internal/owner"
)

// A run directory holds everything one twice run creates on disk: the
// harness's records and go's own temporary build directories (GOTMPDIR).
// Its owner file (internal/owner's marker) names the process that made
// it, by PID and start time, so the next run removes the directories a killed run left (SIGKILL
// gives no chance to clean up) and never a live run's, nor anything it
// did not make: a directory with the prefix but no owner file is not
// twice's to judge.
const runDirPrefix = "twice-run-"

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
		return runDir{}, fmt.Errorf("cannot make a directory for the run: %w", err)
	}
	d := runDir{path: path}
	for _, step := range []func() error{
		func() error { return owner.Mark(path) },
		func() error { return os.Mkdir(d.records(), 0o755) },
		func() error { return os.Mkdir(d.goTmp(), 0o755) },
	} {
		if err := step(); err != nil {
			d.remove()
			return runDir{}, fmt.Errorf("cannot make a directory for the run: %w", err)
		}
	}
	return d, nil
}

// remove drops the run's directory. go test removes its own build
// directories when it exits; anything left in it goes too.
func (d runDir) remove() { _ = os.RemoveAll(d.path) }

// sweepRunDirs removes the run directories under base whose owner, on
// this host, is gone; never one without an owner file (owner.Rules' zero
// value).
func sweepRunDirs(base string) {
	for _, dir := range owner.Leftovers(base, runDirPrefix, owner.Rules{}) {
		_ = os.RemoveAll(dir)
	}
}
