package report_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/owner"
	"github.com/runtwice/twice/internal/report"
)

// tree is every file and directory under root with its mode and
// contents, to compare byte for byte.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			v += " " + string(data)
		}
		out[path] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, before, after map[string]string) {
	t.Helper()
	for p, v := range before {
		if after[p] != v {
			t.Errorf("%s changed: %q, was %q", p, after[p], v)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s appeared", p)
		}
	}
}

// TestClaimDirRefusesWhatItDidNotMake: a path that exists and is not a
// report of twice's is refused with a message naming it, and nothing
// under its parent changes.
func TestClaimDirRefusesWhatItDidNotMake(t *testing.T) {
	for _, tt := range []struct {
		name  string
		make  func(t *testing.T, path string)
		wants []string
	}{
		{name: "file", make: func(t *testing.T, path string) { write(t, path, "important") },
			wants: []string{"is a file, not a report directory"}},
		{name: "source package", make: func(t *testing.T, path string) {
			write(t, filepath.Join(path, "billing.go"), "package billing\n")
			write(t, filepath.Join(path, "billing_test.go"), "package billing\n")
		}, wants: []string{"holds files twice did not write (billing.go, billing_test.go)"}},
		{name: "report with a file of the user's", make: func(t *testing.T, path string) {
			write(t, filepath.Join(path, report.FileMarker), "marker")
			write(t, filepath.Join(path, report.FileHTML), "<p>old</p>")
			write(t, filepath.Join(path, "notes.txt"), "mine")
		}, wants: []string{"holds files twice did not write (notes.txt)"}},
		{name: "report files without a marker or report.json", make: func(t *testing.T, path string) {
			write(t, filepath.Join(path, report.FileHTML), "<p>my own page</p>")
		}, wants: []string{"without the .twice-report file", "(index.html)"}},
		{name: "symbolic link", make: func(t *testing.T, path string) {
			target := path + "-target"
			if err := os.Mkdir(target, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path); err != nil {
				t.Skip(err)
			}
		}, wants: []string{"is a symbolic link"}},
		{name: "many files", make: func(t *testing.T, path string) {
			for _, n := range []string{"a", "b", "c", "d", "e"} {
				write(t, filepath.Join(path, n), n)
			}
		}, wants: []string{"(a, b, c, and 2 more)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			path := filepath.Join(parent, "out")
			tt.make(t, path)
			before := tree(t, parent)
			d, err := report.ClaimDir(path)
			if err == nil {
				d.Release()
				t.Fatal("report.ClaimDir took it")
			}
			for _, w := range append(tt.wants, "[twice] -o "+path, "leaves "+path+" as it is") {
				if !strings.Contains(blame.Message(err), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			sameTree(t, before, tree(t, parent))
		})
	}
}

// TestClaimDirTakesWhatIsItsOwn: a new path, an empty directory, a
// previous report and a report a twice without the marker wrote are
// taken; a claim not written leaves things as they were.
func TestClaimDirTakesWhatIsItsOwn(t *testing.T) {
	for _, tt := range []struct {
		name string
		make func(t *testing.T, path string)
	}{
		{name: "new path under new directories", make: func(*testing.T, string) {}},
		{name: "empty directory", make: func(t *testing.T, path string) {
			if err := os.MkdirAll(path, 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "previous report", make: func(t *testing.T, path string) {
			if err := fixture(t).Write(path); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "report without a marker", make: func(t *testing.T, path string) {
			if err := fixture(t).Write(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(path, report.FileMarker)); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			path := filepath.Join(parent, "a", "b", "out")
			tt.make(t, path)
			d, err := report.ClaimDir(path)
			if err != nil {
				t.Fatal(err)
			}
			d.Release()
			d, err = report.ClaimDir(path)
			if err != nil {
				t.Fatalf("claimed, released, then: %v", err)
			}
			if err := d.Write(fixture(t)); err != nil {
				t.Fatal(err)
			}
			d.Release()
			if _, err := os.Stat(filepath.Join(path, report.FileJSON)); err != nil {
				t.Error(err)
			}
			left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".out.*"))
			if len(left) != 0 {
				t.Errorf("temporary directories left beside the report: %q", left)
			}
		})
	}
}

// TestClaimDirReleasedUnwrittenRemovesWhatItMade: a run that stops
// before its report (a signal) leaves no directory it made.
func TestClaimDirReleasedUnwrittenRemovesWhatItMade(t *testing.T) {
	parent := t.TempDir()
	d, err := report.ClaimDir(filepath.Join(parent, "out"))
	if err != nil {
		t.Fatal(err)
	}
	d.Release()
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Errorf("left %d entries", len(entries))
	}
}

// TestClaimDirUnwritable: a path that cannot be made is refused at the
// claim, which the runner makes before any check runs.
func TestClaimDirUnwritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	write(t, file, "x")
	for _, path := range []string{filepath.Join(file, "out"), "/proc/nope/out"} {
		if runtime.GOOS != "linux" && strings.HasPrefix(path, "/proc") {
			continue
		}
		d, err := report.ClaimDir(path)
		if err == nil {
			d.Release()
			t.Errorf("report.ClaimDir(%s) took it", path)
			continue
		}
		if !strings.Contains(blame.Message(err), "[twice] cannot write the report to "+path) || !strings.Contains(blame.Message(err), "nothing was checked") {
			t.Errorf("report.ClaimDir(%s): %v", path, err)
		}
	}
}

// TestClaimDirOnceAtATime: while one claim holds a directory, another is
// refused as in use; once it is released (written or not), the next
// claim takes it.
func TestClaimDirOnceAtATime(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("no flock")
	}
	path := filepath.Join(t.TempDir(), "out")
	first, err := report.ClaimDir(path)
	if err != nil {
		t.Fatal(err)
	}
	second, err := report.ClaimDir(path)
	if err == nil {
		second.Release()
		t.Fatal("a second claim took the directory the first holds")
	}
	if !errors.Is(err, report.ErrDirInUse) || !strings.Contains(err.Error(), "another twice report is writing into it now") {
		t.Errorf("second claim: %v, want report.ErrDirInUse", err)
	}
	if err := first.Write(fixture(t)); err != nil {
		t.Fatal(err)
	}
	// Written, not yet released: the directory at path is a new one,
	// which the old lock does not hold; a claim may take it, the first
	// run has nothing more to write.
	third, err := report.ClaimDir(path)
	if err != nil {
		t.Fatalf("after the first wrote: %v", err)
	}
	first.Release()
	third.Release()
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestClaimDirSweepsKilledRunsTemporaryDirectories: a run killed before
// it swapped its report in leaves its temporary directory beside the
// report; the next claim removes it when its process is gone, and never
// a directory it cannot tell is a dead run's.
func TestClaimDirSweepsKilledRunsTemporaryDirectories(t *testing.T) {
	parent := t.TempDir()
	path := filepath.Join(parent, "out")
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Skip(err)
	}
	host, _ := os.Hostname()
	dead := filepath.Join(parent, ".out.new-111")
	write(t, filepath.Join(dead, owner.File), fmt.Sprintf("%d - %s\n", gone.Process.Pid, host))
	write(t, filepath.Join(dead, report.FileHTML), "half a report")
	unmarked := filepath.Join(parent, ".out.new-222")
	write(t, filepath.Join(unmarked, "mine.txt"), "not twice's")
	d, err := report.ClaimDir(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Release()
	if _, err := os.Stat(dead); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the dead run's %s is still there: %v", dead, err)
	}
	if _, err := os.Stat(filepath.Join(unmarked, "mine.txt")); err != nil {
		t.Errorf("an unmarked directory was touched: %v", err)
	}
	if err := d.Write(fixture(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(path, owner.File)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the report holds the owner marker of its temporary directory: %v", err)
	}
}
