package twicekafka_test

import (
	"context"
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twicekafka "github.com/runtwice/twice/adapters/kafka"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

// readIdle reads until the Reader is closed and handles nothing.
func readIdle(*harness.Delivery) twicekafka.ReaderLoop {
	return func(ctx context.Context, r *kafka.Reader) error {
		for {
			if _, err := r.FetchMessage(ctx); err != nil {
				return nil
			}
		}
	}
}

// A ReaderJob whose config cannot consume the record, that has no loop,
// or that is pointed at shared brokers, is refused with what to change.
func TestReaderJobMisuse(t *testing.T) {
	rec := twicekafka.Record{Topic: "payments", Value: []byte(`{}`)}
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(`CREATE TABLE t (n int)`)}, Faults: []faults.Fault{faults.RunTwice()}}
	for _, tt := range []struct {
		name    string
		rc      kafka.ReaderConfig
		newLoop func(*harness.Delivery) twicekafka.ReaderLoop
		env     string
		want    string
	}{
		{"no group", kafka.ReaderConfig{Topic: "payments"}, readIdle, "", "the kafka.ReaderConfig has no GroupID"},
		{"another topic", kafka.ReaderConfig{GroupID: "g", Topic: "refunds"}, readIdle, "", `reads Topic "refunds" (GroupTopics [])`},
		{"invalid", kafka.ReaderConfig{GroupID: "g", Topic: "payments", Partition: 2}, readIdle, "", "the kafka.ReaderConfig is invalid: either Partition or GroupID may be specified, but not both"},
		{"nil loop", kafka.ReaderConfig{GroupID: "g", Topic: "payments"}, nil, "", "ReaderJob's newLoop is nil"},
		{"shared brokers", kafka.ReaderConfig{GroupID: "g", Topic: "payments"}, readIdle, "127.0.0.1:1", "ReaderJob runs on an in-process kfake cluster only"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(twicekafka.BrokersEnv, tt.env)
			res, err := harness.Run(t.Context(), twicekafka.ReaderJob("misuse", rec, tt.rc, tt.newLoop), cfg)
			if res != nil {
				t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
