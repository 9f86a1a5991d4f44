package queuetest_test

import (
	"testing"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/harness/queue/queuetest"
)

// An adapter's test says how its job runs a plain handler; the suite does
// the rest, one subtest a rule. A queue.Model stands in for the adapter's
// queue here.
func ExampleRun() {
	newJob := func(name string, h harness.Handler) harness.Job {
		return harness.Job{Name: name, Handler: h, Queue: queue.Model{}}
	}
	// In the adapter's conformance_test.go:
	testConformance := func(t *testing.T) {
		queuetest.Run(t, newJob)
	}
	_ = testConformance
}
