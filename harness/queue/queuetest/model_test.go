package queuetest_test

import (
	"testing"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/harness/queue/queuetest"
)

// modelJob is a plain job on the harness's own model of a queue.
func modelJob(name string, h harness.Handler) harness.Job {
	return harness.Job{Name: name, Handler: h, Queue: queue.Model{}}
}

// The harness's own model keeps its promises: it keeps no state, so it
// hands an acked job out again, and it has no retry rule.
func TestModel(t *testing.T) {
	queuetest.Run(t, modelJob)
}

func BenchmarkCheck(b *testing.B) {
	queuetest.Bench(b, modelJob)
}
