package twicekafka_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	twicekafka "github.com/runtwice/twice/adapters/kafka"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue/queuetest"
)

// suiteJob runs queuetest's handlers as a franz-go consumer's handler:
// the adapter commits the record's offset after a nil return.
func suiteJob(name string, h harness.Handler) harness.Job {
	return twicekafka.Job(name, twicekafka.Record{Topic: topic, Key: []byte("k"), Value: []byte("v")},
		func(d *harness.Delivery, _ *kgo.Client) twicekafka.Handler {
			return func(ctx context.Context, _ *kgo.Record) error { return h(ctx, d) }
		})
}

// The Kafka queue keeps the promises of every queue on a kfake cluster of
// each scenario's own; the conformance tests beside it hold each of its
// answers to franz-go's own clients.
func TestQueueConformance(t *testing.T) {
	queuetest.Run(t, suiteJob)
}

// BenchmarkCheck is the cost of Kafka's bookkeeping in a check, against
// the same statement as a plain handler (queuetest.Bench):
//
//	cd adapters/kafka && go test -run '^$' -bench Check -benchtime 3x -count 5 .
func BenchmarkCheck(b *testing.B) {
	queuetest.Bench(b, suiteJob)
}
