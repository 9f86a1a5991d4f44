package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/runtwice/twice/harness"
)

// TestReplayRunsExactlyTheSchedule replays one schedule of a broken job:
// go test runs only it (1 of 1 scenarios) and prints its diff.
func TestReplayRunsExactlyTheSchedule(t *testing.T) {
	const schedule = "j1a1w1!crash > +30s j1a2w2"
	var stdout, stderr bytes.Buffer
	code := run([]string{"replay", schedule, "./testdata/unexpected", "-run", "^TestAddPoints$"}, &stdout, &stderr)
	out := stdout.String() + stderr.String()
	t.Logf("twice replay: exit %d\n%s", code, out)
	if code != 1 {
		t.Errorf("exit code = %d, want 1: the schedule still differs", code)
	}
	for _, want := range []string{
		"[twice] " + harness.ReplayEnv + "='" + schedule + "' go test -count=1 -run=^TestAddPoints$ -v ./testdata/unexpected",
		"1 of 1 scenarios differ",
		"(schedule " + schedule + ")",
		`"points": int64(170)`,
		`"points": int64(220)`,
		// The rerun line reruns the schedule, not the whole matrix.
		"rerun: go test -run '^TestAddPoints$' ./cmd/twice/twice-core/testdata/unexpected -twice.replay='" + schedule + "'",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("replay output lacks %q", want)
		}
	}
}

// TestReplayMatchingNoTestExits2: a -run that matches no check (a typo)
// replayed nothing, and says so, instead of "the test passed".
func TestReplayMatchingNoTestExits2(t *testing.T) {
	for _, tt := range []struct{ pkg, run string }{
		{"./testdata/unexpected", "^TestNope$"}, // no such test
	} {
		var stdout, stderr bytes.Buffer
		code := run([]string{"replay", "j1a1w1 > j1a2w2", tt.pkg, "-run", tt.run}, &stdout, &stderr)
		t.Logf("twice replay -run %s: exit %d\n%s%s", tt.run, code, stdout.String(), stderr.String())
		if code != 2 {
			t.Errorf("-run %s: exit code = %d, want 2", tt.run, code)
		}
		if want := "matched no test of " + tt.pkg + " that checks a job"; !strings.Contains(stderr.String(), want) {
			t.Errorf("-run %s: stderr lacks %q", tt.run, want)
		}
	}
}
