package owner

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLeftovers judges directories named after real processes: this
// test's own, one that exited and was reaped, one that exited and was not
// (a zombie).
func TestLeftovers(t *testing.T) {
	host, _ := os.Hostname()
	gone := exitedProcess(t)
	zombie := zombieProcess(t)
	old := func(fs.FileInfo) bool { return true }

	for _, tc := range []struct {
		name   string
		marker string // "" writes no marker
		rules  Rules
		want   bool
	}{
		{name: "owner alive", marker: Self().String() + " " + host, want: false},
		{name: "owner exited", marker: gone.String() + " " + host, want: true},
		{name: "owner a zombie", marker: zombie.String() + " " + host, want: true},
		{name: "owner on another host", marker: gone.String() + " not-" + host, want: false},
		{name: "no host", marker: gone.String(), want: false},
		{name: "malformed", marker: "twice", want: false},
		{name: "no marker", want: false},
		{name: "no marker, the caller's rule says leftover", rules: Rules{Unmarked: old}, want: true},
		{name: "owner alive, unmarked rule set", marker: Self().String() + " " + host, rules: Rules{Unmarked: old}, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dir := filepath.Join(base, "twice-x-1")
			other := filepath.Join(base, "other-1") // another prefix: never judged
			for _, d := range []string{dir, other} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
				if tc.marker != "" {
					if err := os.WriteFile(filepath.Join(d, File), []byte(tc.marker+"\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			var want []string
			if tc.want {
				want = []string{dir}
			}
			if got := Leftovers(base, "twice-x-", tc.rules); !slices.Equal(got, want) {
				t.Errorf("Leftovers = %q, want %q", got, want)
			}
		})
	}
}

// TestMark: a directory this process marks names it, on this host, and is
// not a leftover.
func TestMark(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "twice-x-1")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Mark(dir); err != nil {
		t.Fatal(err)
	}
	p, here, err := Read(dir)
	if err != nil || p != Self() || !here {
		t.Errorf("Read = %v, %v, %v; want %v, true, nil", p, here, err, Self())
	}
	if got := Leftovers(base, "twice-x-", Rules{}); len(got) != 0 {
		t.Errorf("Leftovers = %q, want none: this process owns it", got)
	}
}

// exitedProcess is a process that ran, exited and was reaped.
func exitedProcess(t *testing.T) Process {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := Of(cmd.Process.Pid)
	if !p.Alive() {
		t.Fatalf("%v is not alive while it runs", p)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return p
}

// zombieProcess is a process that exited and that nobody reaped yet.
func zombieProcess(t *testing.T) Process {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Wait() })
	p := Of(cmd.Process.Pid)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	stat := "/proc/" + strconv.Itoa(p.PID) + "/stat"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(stat)
		if err != nil {
			t.Skipf("no /proc to see a zombie in: %v", err)
		}
		if strings.Contains(string(b), ") Z ") {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v is not a zombie 10 s after SIGKILL: %s", p, b)
		}
	}
}

func TestParse(t *testing.T) {
	for _, p := range []Process{{PID: 42, Start: "123"}, {PID: 42}} {
		if got, ok := Parse(p.String()); !ok || got != p {
			t.Errorf("Parse(%q) = %v, %v; want %v, true", p.String(), got, ok, p)
		}
	}
}
