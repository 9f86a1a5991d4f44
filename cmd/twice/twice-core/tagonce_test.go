package main

import (
	"bytes"
	"strings"
	"testing"
)

// assertTaggedOnce checks that every line of out is a message starting
// with the [twice] tag and carrying it once: the command tags what it
// prints where it prints it (say, sayErr), never at the error's source.
func assertTaggedOnce(t *testing.T, out string) {
	t.Helper()
	for line := range strings.SplitSeq(strings.TrimRight(out, "\n"), "\n") {
		if !strings.HasPrefix(line, "[twice] ") {
			t.Errorf("line lacks the tag at its start: %q", line)
		}
		if n := strings.Count(line, "[twice]"); n != 1 {
			t.Errorf("line tagged %d times: %q", n, line)
		}
	}
}

// The command's own misuse messages and the errors it prints are tagged
// once (TestReportShardMisuse checks report's).
func TestCommandMessagesAreTaggedOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"kept both ways", []string{"kept", "-run", "0a1b2c3d", "-all"}, "[twice] kept takes -run ID or -all, not both"},
		{"kept a stranger", []string{"kept", "-drop", "customers"}, `[twice] "customers" is not the name of a kept database`},
		{"plan with packages", []string{"plan", "./..."}, "[twice] twice plan takes no packages (./...)"},
		{"plan too wide", []string{"plan", "-shards", "1000"}, "[twice] twice plan -shards 1000: want 1 to "},
		{"replay a bad schedule", []string{"replay", "j1a1w1 >", "./testdata/plain", "-run", "TestX"}, "[twice] quote the schedule as the report prints it"},
		{"replay without -run", []string{"replay", "j1a1w1 > j1a2w2", "./testdata/plain"}, "[twice] replay needs -run naming the test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code == 0 {
				t.Errorf("twice %q: exit 0, want a failure", tc.args)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("twice %q: stderr %q lacks %q", tc.args, stderr.String(), tc.want)
			}
			assertTaggedOnce(t, stderr.String())
			if stdout.Len() > 0 {
				assertTaggedOnce(t, stdout.String())
			}
		})
	}
}
