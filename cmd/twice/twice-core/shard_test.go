package main

import (
	"strings"
	"testing"
)

// twice report takes its shard as the tests do: -shard, then
// TWICE_SHARD, then the CI's own variables (GitLab's here, counted from
// 1); a bad CI value is an error naming the variables.
func TestShardOfCIVariables(t *testing.T) {
	t.Setenv("TWICE_SHARD", "")
	t.Setenv("CI_NODE_INDEX", "2")
	t.Setenv("CI_NODE_TOTAL", "3")
	s, _, err := shardOf("", nil)
	if err != nil || s == nil || s.Index != 2 || s.Count != 3 {
		t.Fatalf("shardOf = %+v, %v; want shard 2/3 from GitLab's variables", s, err)
	}
	s, _, err = shardOf("1/1", nil)
	if err != nil || s == nil || s.Index != 1 || s.Count != 1 {
		t.Fatalf("shardOf(-shard 1/1) = %+v, %v; want the flag's shard", s, err)
	}
	t.Setenv("CI_NODE_INDEX", "4")
	if _, _, err := shardOf("", nil); err == nil || !strings.Contains(err.Error(), "CI_NODE_INDEX/CI_NODE_TOTAL") {
		t.Errorf("shardOf with CI_NODE_INDEX=4 of 3: %v, want an error naming the variables", err)
	}
}
