package twicekafka_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	twicekafka "github.com/runtwice/twice/adapters/kafka"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

// idle polls until it is stopped and handles nothing.
func idle(*harness.Delivery) twicekafka.Loop {
	return func(ctx context.Context, cl *kgo.Client) error {
		for ctx.Err() == nil {
			if fs := cl.PollFetches(ctx); fs.IsClientClosed() {
				return nil
			}
		}
		return nil
	}
}

// A LoopJob whose options cannot consume the record, or that is pointed
// at shared brokers, is refused with what to change.
func TestLoopJobMisuse(t *testing.T) {
	rec := twicekafka.Record{Topic: "payments", Value: []byte(`{}`)}
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(`CREATE TABLE t (n int)`)}, Faults: []faults.Fault{faults.RunTwice()}}
	for _, tt := range []struct {
		name string
		opts []kgo.Opt
		env  string
		want string
	}{
		{"no group", []kgo.Opt{kgo.ConsumeTopics("payments")}, "", "the consumer's options name no group (kgo.ConsumerGroup)"},
		{"another topic", []kgo.Opt{kgo.ConsumerGroup("g"), kgo.ConsumeTopics("refunds")}, "", `the consumer's options consume ["refunds"] (kgo.ConsumeTopics), not the record's topic "payments"`},
		{"shared brokers", []kgo.Opt{kgo.ConsumerGroup("g"), kgo.ConsumeTopics("payments")}, "127.0.0.1:1", "LoopJob runs on an in-process kfake cluster only"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(twicekafka.BrokersEnv, tt.env)
			res, err := harness.Run(t.Context(), twicekafka.LoopJob("misuse", rec, tt.opts, idle), cfg)
			if res != nil {
				t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// The producer's own code must send one record to the consumer's topic,
// and Record then names only the topic.
func TestProduceMisuse(t *testing.T) {
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(`CREATE TABLE t (n int)`)}, Faults: []faults.Fault{faults.ProducerRetry()}}
	opts := []kgo.Opt{kgo.ConsumerGroup("g"), kgo.ConsumeTopics("payments")}
	send := func(topics ...string) func(context.Context, twicekafka.Producing) error {
		return func(ctx context.Context, p twicekafka.Producing) error {
			for _, topic := range topics {
				if err := p.Client.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(`{}`)}).FirstErr(); err != nil {
					return err
				}
			}
			return nil
		}
	}
	for _, tt := range []struct {
		name    string
		rec     twicekafka.Record
		produce func(context.Context, twicekafka.Producing) error
		want    string
	}{
		{"record and code", twicekafka.Record{Topic: "payments", Value: []byte(`{}`)}, send("payments"),
			`both Record's key, value or headers and Produce say what is sent; pass Record{Topic: "payments"} alone`},
		{"nothing sent", twicekafka.Record{Topic: "payments"}, send("audit"),
			`the producer's code (twicekafka.Produce), send 1 produced no record to "payments" (it produced to ["audit"])`},
		{"two sent", twicekafka.Record{Topic: "payments"}, send("payments", "payments"),
			`send 1 produced 2 records to "payments" in one call`},
		{"an error", twicekafka.Record{Topic: "payments"}, func(context.Context, twicekafka.Producing) error { return errors.New("broker said no") },
			`send 1 returned: broker said no`},
		{"a panic", twicekafka.Record{Topic: "payments"}, func(context.Context, twicekafka.Producing) error { panic("nil map") },
			`send 1 returned: panicked: nil map`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, err := harness.Run(t.Context(), twicekafka.LoopJob("misuse", tt.rec, opts, idle, twicekafka.Produce(tt.produce)), cfg)
			if res != nil {
				t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// A per-record handler's own produce, on the client it was given, is an
// effect seen at the broker; one through Outbox is that one effect, not
// two.
func TestJobProducesAreEffects(t *testing.T) {
	rec := twicekafka.Record{Topic: "orders", Key: []byte("order-1"), Value: []byte(`{"id":1}`)}
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(`CREATE TABLE t (n int)`)}, Faults: []faults.Fault{faults.ProducerRetry()}}
	receipt := &kgo.Record{Topic: "receipts", Key: []byte("order-1"), Value: []byte("sent")}
	for _, tc := range []struct {
		name   string
		outbox bool
	}{{"plain client", false}, {"outbox", true}} {
		t.Run(tc.name, func(t *testing.T) {
			job := twicekafka.Job("receipt", rec, func(d *harness.Delivery, cl *kgo.Client) twicekafka.Handler {
				var out twicekafka.Producer = cl
				if tc.outbox {
					out = twicekafka.Outbox(d, cl)
				}
				return func(ctx context.Context, _ *kgo.Record) error {
					r := *receipt
					return out.ProduceSync(ctx, &r).FirstErr()
				}
			})
			res, err := harness.Run(t.Context(), job, cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
			require.Len(t, res.ReferenceEffects, 1, "%s", res)
			assert.Equal(t, "kafka:receipts", res.ReferenceEffects[0].Kind)
			require.Len(t, res.Scenarios, 1)
			assert.Len(t, res.Scenarios[0].Effects, 2, "each copy's handler sends the receipt once: %s", res)
			assert.False(t, res.Idempotent(), "the producer's copy sends the receipt again: %s", res)
		})
	}
}
