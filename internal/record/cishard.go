package record

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// CIShard is the shard a CI system's own variables give a job run on
// several machines, as "i/n" counted from 1, with the variables it came
// from ("CIRCLE_NODE_INDEX/CIRCLE_NODE_TOTAL"); text is empty when none
// is set. getenv reads the environment (os.Getenv).
//
// Supported, in this order: Bazel (TEST_SHARD_INDEX from 0,
// TEST_TOTAL_SHARDS; the shard status file Bazel names in
// TEST_SHARD_STATUS_FILE is touched, which tells Bazel the test shards),
// CircleCI (CIRCLE_NODE_INDEX from 0, CIRCLE_NODE_TOTAL), Buildkite
// (BUILDKITE_PARALLEL_JOB from 0, BUILDKITE_PARALLEL_JOB_COUNT) and
// GitLab (CI_NODE_INDEX from 1, CI_NODE_TOTAL). GitHub Actions has no
// such variables (a matrix's values are the workflow's own names), nor
// has a Kubernetes Indexed Job a count beside its JOB_COMPLETION_INDEX:
// there, set TWICE_SHARD from the matrix or the Job's spec.
func CIShard(getenv func(string) string) (text, source string, err error) {
	for _, ci := range ciShards {
		is, ns := strings.TrimSpace(getenv(ci.index)), strings.TrimSpace(getenv(ci.total))
		if is == "" && ns == "" {
			continue
		}
		source = ci.index + "/" + ci.total
		i, ierr := strconv.Atoi(is)
		n, nerr := strconv.Atoi(ns)
		if ierr != nil || nerr != nil {
			return "", source, fmt.Errorf("%s=%q and %s=%q are no shard: want two numbers, the index counted from %d and the count", ci.index, is, ci.total, ns, ci.from)
		}
		if ci.status != "" {
			if err := touch(getenv(ci.status)); err != nil {
				return "", source, fmt.Errorf("touching %s (%s), which tells the test runner that the test shards: %w", ci.status, getenv(ci.status), err)
			}
		}
		return fmt.Sprintf("%d/%d", i-ci.from+1, n), source, nil
	}
	return "", "", nil
}

// ciShard is one CI system's shard variables: the index, counted from
// from, the count, and the file to touch, if any.
type ciShard struct {
	index, total, status string
	from                 int
}

var ciShards = []ciShard{
	{index: "TEST_SHARD_INDEX", total: "TEST_TOTAL_SHARDS", status: "TEST_SHARD_STATUS_FILE", from: 0},
	{index: "CIRCLE_NODE_INDEX", total: "CIRCLE_NODE_TOTAL", from: 0},
	{index: "BUILDKITE_PARALLEL_JOB", total: "BUILDKITE_PARALLEL_JOB_COUNT", from: 0},
	{index: "CI_NODE_INDEX", total: "CI_NODE_TOTAL", from: 1},
}

// touch creates path if it is missing, and leaves what it holds.
func touch(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}
