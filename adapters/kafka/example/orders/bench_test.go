package orders_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runtwice/twice/adapters/kafka/example/orders"
	"github.com/runtwice/twice/harness"
)

// BenchmarkScenario is the cost of Kafka in a check: InboxByKey's default
// matrix through the Kafka adapter (a kfake cluster, a producer and a
// consumer group per scenario) against the same handler as a plain
// harness job handed the record directly, timed in the same loop so both
// see the same machine. kafka/plain is the ratio of their ms/scenario;
// the machine is shared and noisy, so read the ratio over a few counts:
//
//	cd adapters/kafka && TWICE_POSTGRES=local go test -run '^$' -bench Scenario -benchtime 3x -count 3 ./example/orders/
func BenchmarkScenario(b *testing.B) {
	plain := harness.Job{Name: "inbox-by-key-plain", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return orders.InboxByKey{DB: d.DB}.Handle(ctx, &kgo.Record{Topic: paid.Topic, Key: paid.Key, Value: paid.Value})
	}}
	var kafka, bare time.Duration
	var kafkaScenarios, bareScenarios int
	for b.Loop() {
		kafka += timed(b, inboxByKey(), &kafkaScenarios)
		bare += timed(b, plain, &bareScenarios)
	}
	perKafka := float64(kafka.Microseconds()) / 1e3 / float64(b.N*max(kafkaScenarios, 1))
	perPlain := float64(bare.Microseconds()) / 1e3 / float64(b.N*max(bareScenarios, 1))
	b.ReportMetric(perKafka, "kafka-ms/scenario")
	b.ReportMetric(perPlain, "plain-ms/scenario")
	b.ReportMetric(perKafka/perPlain, "kafka/plain")
	b.ReportMetric(float64(kafkaScenarios), "kafka-scenarios/check")
	b.ReportMetric(float64(bareScenarios), "plain-scenarios/check")
}

func timed(b *testing.B, job harness.Job, scenarios *int) time.Duration {
	b.Helper()
	start := time.Now()
	res, err := harness.Run(context.Background(), job, cfg)
	took := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	if !res.Idempotent() {
		b.Fatalf("%s", res)
	}
	*scenarios = len(res.Scenarios)
	_ = res.DropDatabases(context.Background())
	return took
}
