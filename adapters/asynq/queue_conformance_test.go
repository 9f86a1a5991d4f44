package twiceasynq_test

import (
	"context"
	"testing"

	"github.com/hibiken/asynq"

	twiceasynq "github.com/runtwice/twice/adapters/asynq"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue/queuetest"
)

func suiteJob(name string, h harness.Handler) harness.Job {
	return twiceasynq.Job(name, asynq.NewTask("queuetest:"+name, nil),
		func(d *harness.Delivery) asynq.Handler {
			return asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error { return h(ctx, d) })
		})
}

// asynq's queue keeps the promises of every queue, on asynq's own server
// and a real Redis, fresh for every scenario.
func TestQueueConformance(t *testing.T) {
	queuetest.Run(t, suiteJob)
}

// BenchmarkCheck is the cost of asynq's bookkeeping in a check, against
// the same statement as a plain handler (queuetest.Bench):
//
//	cd adapters/asynq && go test -run '^$' -bench Check -benchtime 3x -count 5 .
func BenchmarkCheck(b *testing.B) {
	queuetest.Bench(b, suiteJob)
}
