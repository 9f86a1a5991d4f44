package twicewatermill_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	twicewatermill "github.com/runtwice/twice/adapters/watermill"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue/queuetest"
)

// suiteJob builds queuetest's jobs on the modelled broker, or on
// watermill-sql with opts.
func suiteJob(opts ...twicewatermill.Option) queuetest.NewJob {
	return func(name string, h harness.Handler) harness.Job {
		return twicewatermill.Job(name, []byte(`{}`), nil, func(d *harness.Delivery) message.HandlerFunc {
			return func(msg *message.Message) ([]*message.Message, error) { return nil, h(msg.Context(), d) }
		}, opts...)
	}
}

// Both of Watermill's queues keep the promises of every queue: the
// modelled broker, and watermill-sql, whose ack is the offset its
// subscriber commits in its own transaction.
func TestQueueConformance(t *testing.T) {
	t.Run("modelled broker", func(t *testing.T) { queuetest.Run(t, suiteJob()) })
	t.Run("watermill-sql", func(t *testing.T) {
		queuetest.Run(t, suiteJob(twicewatermill.SQL("queuetest_topic", "queuetest")), queuetest.AckedByCommit())
	})
}

// BenchmarkCheck is the cost of Watermill's bookkeeping in a check, on
// the modelled broker and on watermill-sql, against the same statement as
// a plain handler (queuetest.Bench):
//
//	cd adapters/watermill && go test -run '^$' -bench Check -benchtime 3x -count 5 .
func BenchmarkCheck(b *testing.B) {
	b.Run("broker", func(b *testing.B) { queuetest.Bench(b, suiteJob()) })
	b.Run("sql", func(b *testing.B) { queuetest.Bench(b, suiteJob(twicewatermill.SQL("bench_topic", "points"))) })
}
