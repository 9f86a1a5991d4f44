package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// TestProgressPlainLines: away from a terminal, one line per finished
// package, with how far the run is.
func TestProgressPlainLines(t *testing.T) {
	var out bytes.Buffer
	p := newProgress(&out)
	if p.tty {
		t.Fatal("a bytes.Buffer is taken for a terminal")
	}
	p.start(2, 40, t.TempDir())
	p.buildStep(false)
	p.buildStep(true)
	p.event(testEvent{Action: "start", Package: "example.com/a"})
	p.event(testEvent{Action: "run", Package: "example.com/a", Test: "TestX"})
	p.event(testEvent{Action: "pass", Package: "example.com/a"})
	p.event(testEvent{Action: "fail", Package: "example.com/b"})
	p.stop()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		"[twice] building the tests of 2 packages, then running their checks: go test compiles what its build cache lacks (up to 40 packages; minutes when the cache is empty)",
		"[twice] the first test binary runs after 0:00 (1 of up to 40 packages compiled, 1 test binary linked)",
		"[twice] ok   example.com/a (1/2 packages, 0 jobs checked, 0:00)",
		"[twice] FAIL example.com/b (2/2 packages, 0 jobs checked, 0:00)",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("progress lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if strings.Contains(out.String(), "\r") || strings.Contains(out.String(), "\033[") {
		t.Error("plain progress holds terminal control characters")
	}
}

// TestProgressWhileBuilding: twice says it is building from its first
// line, and how far go got by the time the first test binary runs. The
// package's test is new to the build cache (a fresh constant), so go
// compiles and links it however warm the cache is.
func TestProgressWhileBuilding(t *testing.T) {
	dir, err := os.MkdirTemp("testdata", "fresh-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	src := fmt.Sprintf("package fresh\n\nimport \"testing\"\n\nconst seed = %q\n\nfunc TestSeed(t *testing.T) {\n\tif seed == \"\" {\n\t\tt.Fatal(\"no seed\")\n\t}\n}\n", randomHex(t))
	if err := os.WriteFile(filepath.Join(dir, "fresh_test.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	run([]string{"report", "-o", filepath.Join(t.TempDir(), "r"), "./" + filepath.ToSlash(dir)}, &stdout, &stderr)
	lines := strings.Split(stderr.String(), "\n")
	t.Logf("stderr:\n%s", stderr.String())
	if want := "[twice] report on ./" + filepath.ToSlash(dir) + ": go list names the packages, then go test builds and runs their tests"; lines[0] != want {
		t.Errorf("the first line does not say what twice does:\n%q\nwant\n%q", lines[0], want)
	}
	if len(lines) < 2 || !strings.HasPrefix(lines[1], "[twice] building the tests of 1 package") {
		t.Errorf("the second line does not say twice is building: %q", lines[1:])
	}
	built := regexp.MustCompile(`^\[twice\] the first test binary runs after \d+:\d\d \(([1-9]\d*) of up to \d+ packages compiled, 1 test binary linked\)$`)
	found := false
	for _, l := range lines {
		found = found || built.MatchString(l)
	}
	if !found {
		t.Errorf("no line says how many packages go compiled and linked before the test ran (want one matching %s)", built)
	}
}

// TestProgressBeforeGo: twice's first line is out before it runs go at
// all, since even go list takes seconds on an empty build cache (and the
// user already waited for go run to build twice). The go on PATH here
// only leaves a mark that it ran.
func TestProgressBeforeGo(t *testing.T) {
	bin := t.TempDir()
	ran := filepath.Join(bin, "go-ran")
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte("#!/bin/sh\n: > '"+ran+"'\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	t.Setenv("GOROOT", "")
	w := &firstWrite{ran: ran}
	run([]string{"report", "-o", filepath.Join(t.TempDir(), "r"), "./examples/a", "./examples/b"}, &bytes.Buffer{}, w)
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := os.Stat(ran); err != nil {
		t.Fatalf("twice never ran the go on PATH (%v); it wrote:\n%s", err, w.all.String())
	}
	if want := "[twice] report on ./examples/a ./examples/b: go list names the packages, then go test builds and runs their tests\n"; w.first != want {
		t.Errorf("twice's first write is %q, want %q", w.first, want)
	}
	if w.goFirst {
		t.Error("twice ran go before it said anything")
	}
}

// firstWrite keeps the first thing written to it and whether the fake go
// had run by then.
type firstWrite struct {
	ran string

	mu      sync.Mutex
	first   string
	goFirst bool
	all     bytes.Buffer
}

func (w *firstWrite) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.all.Len() == 0 {
		w.first = string(b)
		_, err := os.Stat(w.ran)
		w.goFirst = err == nil
	}
	return w.all.Write(b)
}
