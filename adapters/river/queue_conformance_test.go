package twiceriver_test

import (
	"context"
	"testing"

	"github.com/riverqueue/river"

	twiceriver "github.com/runtwice/twice/adapters/river"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue/queuetest"
)

// suiteArgs is the job queuetest's handlers run in.
type suiteArgs struct{}

func (suiteArgs) Kind() string { return "twice_queuetest" }

type suiteWorker struct {
	river.WorkerDefaults[suiteArgs]
	d *harness.Delivery
	h harness.Handler
}

func (w *suiteWorker) Work(ctx context.Context, _ *river.Job[suiteArgs]) error { return w.h(ctx, w.d) }

func suiteJob(name string, h harness.Handler) harness.Job {
	return twiceriver.Job(name, suiteArgs{},
		func(d *harness.Delivery) river.Worker[suiteArgs] { return &suiteWorker{d: d, h: h} })
}

// River's queue keeps the promises of every queue, on River's own
// migrations, executor, completer and rescuer.
func TestQueueConformance(t *testing.T) {
	queuetest.Run(t, suiteJob)
}

// BenchmarkCheck is the cost of River's bookkeeping in a check, against
// the same statement as a plain handler (queuetest.Bench):
//
//	cd adapters/river && go test -run '^$' -bench Check -benchtime 3x -count 5 .
func BenchmarkCheck(b *testing.B) {
	queuetest.Bench(b, suiteJob)
}
