package record_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/runtwice/twice/internal/record"
)

// Each CI system's shard variables, read from a fake environment: the
// index counted as that system counts it, the shard as twice counts it
// (from 1), and the variables named.
func TestCIShard(t *testing.T) {
	for _, tc := range []struct {
		name         string
		env          map[string]string
		text, source string
		err          bool
	}{
		{"none", nil, "", "", false},
		{"CircleCI counts from 0", map[string]string{"CIRCLE_NODE_INDEX": "0", "CIRCLE_NODE_TOTAL": "4"}, "1/4", "CIRCLE_NODE_INDEX/CIRCLE_NODE_TOTAL", false},
		{"Buildkite counts from 0", map[string]string{"BUILDKITE_PARALLEL_JOB": "2", "BUILDKITE_PARALLEL_JOB_COUNT": "3"}, "3/3", "BUILDKITE_PARALLEL_JOB/BUILDKITE_PARALLEL_JOB_COUNT", false},
		{"GitLab counts from 1", map[string]string{"CI_NODE_INDEX": "2", "CI_NODE_TOTAL": "5"}, "2/5", "CI_NODE_INDEX/CI_NODE_TOTAL", false},
		{"Bazel counts from 0", map[string]string{"TEST_SHARD_INDEX": "1", "TEST_TOTAL_SHARDS": "2"}, "2/2", "TEST_SHARD_INDEX/TEST_TOTAL_SHARDS", false},
		{"Bazel first", map[string]string{"TEST_SHARD_INDEX": "0", "TEST_TOTAL_SHARDS": "2", "CI_NODE_INDEX": "3", "CI_NODE_TOTAL": "3"}, "1/2", "TEST_SHARD_INDEX/TEST_TOTAL_SHARDS", false},
		{"a count without an index", map[string]string{"CIRCLE_NODE_TOTAL": "4"}, "", "CIRCLE_NODE_INDEX/CIRCLE_NODE_TOTAL", true},
		{"no number", map[string]string{"CI_NODE_INDEX": "two", "CI_NODE_TOTAL": "3"}, "", "CI_NODE_INDEX/CI_NODE_TOTAL", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text, source, err := record.CIShard(func(k string) string { return tc.env[k] })
			if (err != nil) != tc.err {
				t.Fatalf("error %v, want one: %v", err, tc.err)
			}
			if text != tc.text || source != tc.source {
				t.Errorf("CIShard = %q from %q, want %q from %q", text, source, tc.text, tc.source)
			}
		})
	}
}

// Bazel's shard status file is created when missing, which tells Bazel
// the test shards, and one that exists keeps what it holds.
func TestCIShardTouchesBazelStatusFile(t *testing.T) {
	dir := t.TempDir()
	for _, had := range []string{"", "kept"} {
		path := filepath.Join(dir, "status"+had)
		if had != "" {
			if err := os.WriteFile(path, []byte(had), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		env := map[string]string{"TEST_SHARD_INDEX": "0", "TEST_TOTAL_SHARDS": "3", "TEST_SHARD_STATUS_FILE": path}
		if _, _, err := record.CIShard(func(k string) string { return env[k] }); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("the status file %s was not made: %v", path, err)
		}
		if string(got) != had {
			t.Errorf("the status file holds %q, want %q", got, had)
		}
	}
}
