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
	} {
		if !strings.Contains(out, want) {
			t.Errorf("replay output lacks %q", want)
		}
	}
}
