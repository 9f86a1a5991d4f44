package twicekafka_test

import (
	"context"
	"testing"
	"time"

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

// creditLoop fetches each message, inserts a row for it with no dedup,
// then passes it to CommitMessages.
func creditLoop(d *harness.Delivery) twicekafka.ReaderLoop {
	return func(ctx context.Context, r *kafka.Reader) error {
		for {
			m, err := r.FetchMessage(ctx)
			if err != nil {
				return nil
			}
			if _, err := d.DB.Exec(ctx, `INSERT INTO credits (payment) VALUES ($1)`, string(m.Key)); err != nil {
				return err
			}
			if err := r.CommitMessages(ctx, m); err != nil {
				return err
			}
		}
	}
}

// The ack is what kafka-go commits: with synchronous commits the loop's
// CommitMessages is done before the loop asks for the next message, so a
// crash before the ack redelivers nothing; with CommitInterval the
// offset waits for the committer's tick, so a crash before it credits
// twice, while an ack flushes it and the record is not handed out again.
func TestReaderJobAckIsKafkaGoCommit(t *testing.T) {
	rec := twicekafka.Record{Topic: "payments", Key: []byte("pay-1"), Value: []byte(`{}`)}
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(`CREATE TABLE credits (id serial PRIMARY KEY, payment text NOT NULL)`)},
		Faults: []faults.Fault{faults.RunTwice(), faults.CrashBeforeAck()}}
	for _, tt := range []struct {
		name     string
		interval time.Duration
		want     []faults.Name
	}{
		{"synchronous", 0, nil},
		{"interval", time.Hour, []faults.Name{faults.NameCrashBeforeAck}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rc := kafka.ReaderConfig{GroupID: "credits", Topic: "payments", CommitInterval: tt.interval}
			res, err := harness.Run(t.Context(), twicekafka.ReaderJob("ack-"+tt.name, rec, rc, creditLoop), cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
			var got []faults.Name
			for _, sc := range res.Failed() {
				got = append(got, sc.Fault)
			}
			assert.Equal(t, tt.want, got, "%s", res)
		})
	}
}
