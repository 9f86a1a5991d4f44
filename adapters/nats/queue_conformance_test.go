package twicenats_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	twicenats "github.com/runtwice/twice/adapters/nats"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue/queuetest"
)

// suiteJob acks a message its handler took, and Naks one it failed, as a
// JetStream consumer does.
func suiteJob(name string, h harness.Handler) harness.Job {
	return twicenats.Job(name, spec(jetstream.ConsumerConfig{}, ""), func(d *harness.Delivery) jetstream.MessageHandler {
		return func(msg jetstream.Msg) {
			if err := h(context.Background(), d); err != nil {
				_ = msg.Nak()
				return
			}
			_ = msg.Ack()
		}
	})
}

// The JetStream queue keeps the promises of every queue on the embedded
// server, each scenario on a stream of its own.
func TestQueueConformance(t *testing.T) {
	queuetest.Run(t, suiteJob)
}

// BenchmarkCheck is the cost of JetStream's bookkeeping in a check,
// against the same statement as a plain handler (queuetest.Bench):
//
//	cd adapters/nats && go test -run '^$' -bench Check -benchtime 3x -count 5 .
func BenchmarkCheck(b *testing.B) {
	queuetest.Bench(b, suiteJob)
}
