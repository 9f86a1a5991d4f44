package twicekafka_test

import (
	"context"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twicekafka "github.com/runtwice/twice/adapters/kafka"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

// ignore is a handler that takes every record and does nothing with it.
type ignore struct{}

func (ignore) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (ignore) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (ignore) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		sess.MarkMessage(msg, "")
	}
	return nil
}

// oldest is sarama's default config, reading a new group from its oldest
// offset.
func oldest() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	return cfg
}

// A SaramaJob that cannot be checked is refused with what to change.
func TestSaramaJobMisuse(t *testing.T) {
	rec := twicekafka.Record{Topic: "payments", Value: []byte(`{}`)}
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(`CREATE TABLE t (n int)`)}, Faults: []faults.Fault{faults.RunTwice()}}
	handler := func(*harness.Delivery) sarama.ConsumerGroupHandler { return ignore{} }
	noVersion := oldest()
	noVersion.Version = sarama.KafkaVersion{}
	newest := oldest()
	newest.Consumer.Offsets.Initial = sarama.OffsetNewest
	badInterval := oldest()
	badInterval.Consumer.Offsets.AutoCommit.Interval = 0
	tooOld := oldest()
	tooOld.Version = sarama.V0_10_0_0
	for _, tt := range []struct {
		name       string
		group      string
		cfg        *sarama.Config
		newHandler func(*harness.Delivery) sarama.ConsumerGroupHandler
		env        string
		want       string
	}{
		{"nil newHandler", "g", oldest(), nil, "", "SaramaJob's newHandler is nil"},
		{"nil handler", "g", oldest(), func(*harness.Delivery) sarama.ConsumerGroupHandler { return nil }, "", "newHandler returned a nil sarama.ConsumerGroupHandler"},
		{"no group", "", oldest(), handler, "", "SaramaJob's group is empty"},
		{"nil config", "g", nil, handler, "", "SaramaJob's cfg is nil"},
		{"no version", "g", noVersion, handler, "", "the sarama config has no Version"},
		{"newest", "g", newest, handler, "", "Consumer.Offsets.Initial is sarama.OffsetNewest"},
		{"invalid", "g", badInterval, handler, "", "the sarama config is invalid: kafka: invalid configuration (Consumer.Offsets.AutoCommit.Interval must be > 0)"},
		{"too old for groups", "g", tooOld, handler, "", "sarama.NewConsumerGroup from the consumer's config on the kfake cluster: kafka: invalid configuration (consumer groups require Version to be >= V0_10_2_0)"},
		{"shared brokers", "g", oldest(), handler, "127.0.0.1:1", "SaramaJob runs on an in-process kfake cluster only"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(twicekafka.BrokersEnv, tt.env)
			res, err := harness.Run(t.Context(), twicekafka.SaramaJob("misuse", rec, tt.group, tt.cfg, tt.newHandler), cfg)
			if res != nil {
				t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
