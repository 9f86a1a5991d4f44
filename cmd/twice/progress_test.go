package main

import (
	"bytes"
	"strings"
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
	p.start(2, t.TempDir())
	p.event(testEvent{Action: "start", Package: "example.com/a"})
	p.event(testEvent{Action: "run", Package: "example.com/a", Test: "TestX"})
	p.event(testEvent{Action: "pass", Package: "example.com/a"})
	p.event(testEvent{Action: "fail", Package: "example.com/b"})
	p.stop()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		"[twice] running the checks of 2 packages",
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
