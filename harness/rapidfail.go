package harness

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// rapid saves each failure in a fail file, which its next run of the same
// test replays before it draws: testdata/rapid/<test>/<test>-*.fail, whose
// first line that is not a "#" comment is "<version>#<seed>" (rapid's
// persist.go writes it, and reads it back for -rapid.failfile). Explore
// takes the seed from there, and removes the file: it saves the schedule
// instead, which stays valid when the generator changes.

// rapidRoot is where rapid writes fail files, relative to the test's
// package directory.
var rapidRoot = filepath.Join("testdata", "rapid")

// rapidSnapshot is what existed under rapidRoot before a rapid.Check.
type rapidSnapshot struct {
	dirs  map[string]bool // rapidRoot's parents and rapidRoot, and its test directories
	files map[string]bool // fail files
}

// rapidFiles notes the fail files and directories rapid may write under.
func rapidFiles() rapidSnapshot {
	s := rapidSnapshot{dirs: map[string]bool{}, files: map[string]bool{}}
	for _, dir := range []string{"testdata", rapidRoot} {
		if _, err := os.Stat(dir); err == nil {
			s.dirs[dir] = true
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(rapidRoot, "*"))
	for _, d := range dirs {
		s.dirs[d] = true
	}
	files, _ := filepath.Glob(filepath.Join(rapidRoot, "*", "*.fail"))
	for _, f := range files {
		s.files[f] = true
	}
	return s
}

// takeNew reads the seed from the fail file rapid wrote since s was
// taken, and removes that file and the directories rapid made for it
// that are left empty. The seed is 0 when rapid wrote none (nothing
// failed, or it replayed a fail file, or it could not write one).
func (s rapidSnapshot) takeNew() (uint64, error) {
	files, _ := filepath.Glob(filepath.Join(rapidRoot, "*", "*.fail"))
	var seed uint64
	for _, f := range files {
		if s.files[f] {
			continue
		}
		got, err := failFileSeed(f)
		if err != nil {
			return 0, err
		}
		seed = got
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("[twice] internal: removing rapid's fail file: %w", err)
		}
		for dir := filepath.Dir(f); dir != "." && !s.dirs[dir]; dir = filepath.Dir(dir) {
			if os.Remove(dir) != nil {
				break // not empty
			}
		}
	}
	return seed, nil
}

// failFileSeed reads the seed from rapid's fail file f.
func failFileSeed(f string) (uint64, error) {
	file, err := os.Open(f)
	if err != nil {
		return 0, fmt.Errorf("[twice] internal: reading rapid's fail file: %w", err)
	}
	defer func() { _ = file.Close() }() // read only: nothing to lose
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20) // the comments hold the failing test's output
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		_, seed, ok := strings.Cut(line, "#")
		n, err := strconv.ParseUint(seed, 10, 64)
		if !ok || err != nil {
			return 0, fmt.Errorf("[twice] internal: rapid's fail file %s starts with %q, not <version>#<seed>: a rapid this twice does not know", f, line)
		}
		return n, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("[twice] internal: reading rapid's fail file %s: %w", f, err)
	}
	return 0, fmt.Errorf("[twice] internal: rapid's fail file %s holds no seed: a rapid this twice does not know", f)
}
