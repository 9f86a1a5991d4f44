package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/runtwice/twice/internal/report"
)

// snapshot is every file and directory under root with its mode and
// contents, to compare byte for byte.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, _ fs.DirEntry, err error) error {
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

func unchanged(t *testing.T, before, after map[string]string) {
	t.Helper()
	for p, v := range before {
		if a, ok := after[p]; !ok {
			t.Errorf("%s is gone", p)
		} else if a != v {
			t.Errorf("%s changed", p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s appeared", p)
		}
	}
}

// copyTree copies the files of the directory src into dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReportRefusesWhatItDidNotMake: -o naming an existing file, a source
// package, a folder of the user's files or the working directory exits 2
// before any check runs, says why, and leaves everything byte for byte
// as it was (issue 37).
func TestReportRefusesWhatItDidNotMake(t *testing.T) {
	for _, tt := range []struct {
		name string
		// make makes what -o names under parent, and returns -o and the
		// tree to compare.
		make func(t *testing.T, parent string) (out, root string)
		want string
	}{
		{name: "existing file", want: "is a file, not a report directory",
			make: func(t *testing.T, parent string) (string, string) {
				out := filepath.Join(parent, "important.txt")
				if err := os.WriteFile(out, []byte("do not lose me\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				return out, parent
			}},
		{name: "source package", want: "holds files twice did not write (unexpected_test.go)",
			make: func(t *testing.T, parent string) (string, string) {
				out := filepath.Join(parent, "billing")
				copyTree(t, filepath.Join("testdata", "unexpected"), out)
				return out, parent
			}},
		{name: "folder of the user's files", want: "holds files twice did not write (notes, notes.txt)",
			make: func(t *testing.T, parent string) (string, string) {
				out := filepath.Join(parent, "outdir")
				if err := os.MkdirAll(filepath.Join(out, "notes"), 0o700); err != nil {
					t.Fatal(err)
				}
				for _, f := range []string{"notes.txt", filepath.Join("notes", "a.md")} {
					if err := os.WriteFile(filepath.Join(out, f), []byte(f+" of mine\n"), 0o640); err != nil {
						t.Fatal(err)
					}
				}
				return out, parent
			}},
		{name: "working directory", want: "-o . holds files twice did not write",
			make: func(t *testing.T, _ string) (string, string) {
				wd, err := os.Getwd()
				if err != nil {
					t.Fatal(err)
				}
				return ".", wd
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, root := tt.make(t, t.TempDir())
			before := snapshot(t, root)
			var stdout, stderr bytes.Buffer
			code := run([]string{"report", "-o", out, "./testdata/unexpected"}, &stdout, &stderr)
			t.Logf("exit %d\n%s%s", code, stderr.String(), stdout.String())
			if code != report.ExitBroken {
				t.Errorf("exit code = %d, want %d", code, report.ExitBroken)
			}
			if !strings.Contains(stderr.String(), tt.want) || !strings.Contains(stderr.String(), "as it is") {
				t.Errorf("stderr lacks %q and that it is left as it is", tt.want)
			}
			// One line, and no check ran: nothing of go test, no headline.
			if stdout.Len() != 0 || strings.Count(stderr.String(), "\n") != 1 {
				t.Errorf("twice said more than the refusal: a check ran")
			}
			unchanged(t, before, snapshot(t, root))
		})
	}
}

// TestReportUnwritableOutFailsFirst: -o that cannot be made fails before
// any check runs, so no run's results are lost to it.
func TestReportUnwritableOutFailsFirst(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	outs := []string{filepath.Join(file, "rep")}
	if runtime.GOOS == "linux" {
		outs = append(outs, "/proc/nope/rep")
	}
	for _, out := range outs {
		var stdout, stderr bytes.Buffer
		code := run([]string{"report", "-o", out, "./testdata/unexpected"}, &stdout, &stderr)
		t.Logf("-o %s: exit %d\n%s%s", out, code, stderr.String(), stdout.String())
		if code != report.ExitBroken {
			t.Errorf("-o %s: exit code = %d, want %d", out, code, report.ExitBroken)
		}
		if want := "[twice] cannot write the report to " + out; !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "nothing was checked") {
			t.Errorf("-o %s: stderr lacks %q and that nothing was checked", out, want)
		}
		if stdout.Len() != 0 || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("-o %s: twice said more than the refusal: a check ran", out)
		}
	}
}

// TestReportIntoABusyDirectoryIsRefused: a second twice report into the
// directory a running one writes is refused at once (exit 2), and the
// first still writes its report.
func TestReportIntoABusyDirectoryIsRefused(t *testing.T) {
	b := startBlockedRun(t)
	var stdout, stderr bytes.Buffer
	code := run([]string{"report", "-o", b.out, "./testdata/plain"}, &stdout, &stderr)
	t.Logf("second run: exit %d\n%s%s", code, stderr.String(), stdout.String())
	if code != report.ExitBroken {
		t.Errorf("second run: exit code = %d, want %d", code, report.ExitBroken)
	}
	if want := "another twice report is writing into it now"; !strings.Contains(stderr.String(), want) {
		t.Errorf("second run: stderr lacks %q", want)
	}
	if err := os.WriteFile(b.release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.exited:
	case <-time.After(3 * time.Minute): // a bound, not a timing assertion
		t.Fatalf("the first run never finished:\n%s", b.stderr.String())
	}
	if b.exitCode != 0 {
		t.Errorf("first run: exit code = %d, want 0:\n%s", b.exitCode, b.stderr.String())
	}
	if r := readReport(t, b.out); len(r.Jobs) != 1 || r.Jobs[0].Name != "wait-for-release" {
		t.Errorf("the first run's report holds jobs %+v, want wait-for-release", r.Jobs)
	}
}
