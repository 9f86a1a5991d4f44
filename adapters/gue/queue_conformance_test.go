package twicegue_test

import (
	"context"
	"testing"

	"github.com/vgarvardt/gue/v5"

	twicegue "github.com/runtwice/twice/adapters/gue"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue/queuetest"
)

func suiteJob(name string, h harness.Handler) harness.Job {
	return twicegue.Job(name, twicegue.Spec[struct{}]{Type: name},
		func(d *harness.Delivery) gue.WorkFunc {
			return func(ctx context.Context, _ *gue.Job) error { return h(ctx, d) }
		})
}

// gue's queue keeps the promises of every queue: gue_jobs comes with the
// job, and gue's own lock, commit and backoff decide each hand-out. Its
// ack is the delivery's commit, which deletes the job.
func TestQueueConformance(t *testing.T) {
	queuetest.Run(t, suiteJob, queuetest.AckedByCommit())
}

// BenchmarkCheck is the cost of gue's bookkeeping in a check, against the
// same statement as a plain handler (queuetest.Bench):
//
//	cd adapters/gue && go test -run '^$' -bench Check -benchtime 3x -count 5 .
func BenchmarkCheck(b *testing.B) {
	queuetest.Bench(b, suiteJob)
}
