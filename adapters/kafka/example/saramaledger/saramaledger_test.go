package saramaledger_test

import (
	"context"
	"slices"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twicekafka "github.com/runtwice/twice/adapters/kafka"
	"github.com/runtwice/twice/adapters/kafka/example/saramaledger"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

var record = twicekafka.Record{Topic: saramaledger.Topic, Key: []byte("pay-1"), Value: []byte(`{"payment_id":"pay-1","account":7,"amount":50}`)}

var cfg = harness.Config{Setup: []harness.Setup{harness.SQL(saramaledger.Schema)}}

// saramaJob checks a handler as written, in a sarama consumer group from
// its own config.
func saramaJob(name string, scfg *sarama.Config, handler func(d *harness.Delivery) sarama.ConsumerGroupHandler) harness.Job {
	return twicekafka.SaramaJob(name, record, saramaledger.Group, scfg, handler)
}

func run(t *testing.T, job harness.Job, c harness.Config) *harness.Result {
	t.Helper()
	res, err := harness.Run(context.Background(), job, c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	return res
}

// failing is the faults with a scenario that is not idempotent.
func failing(res *harness.Result) []faults.Name {
	var out []faults.Name
	for _, sc := range res.Failed() {
		if !slices.Contains(out, sc.Fault) {
			out = append(out, sc.Fault)
		}
	}
	slices.Sort(out)
	return out
}

// passed is the faults with a scenario that ran and was idempotent: a
// fault not found is one that ran, not one left out.
func passed(res *harness.Result) []faults.Name {
	var out []faults.Name
	for _, sc := range res.Scenarios {
		if sc.Verdict == result.Idempotent && !slices.Contains(out, sc.Fault) {
			out = append(out, sc.Fault)
		}
	}
	return out
}

// Each sarama handler is checked from its own code under the default
// matrix.
func TestSaramaHandlersAsWritten(t *testing.T) {
	t.Run("commit first", func(t *testing.T) {
		res := run(t, saramaJob("sarama-commit-first", saramaledger.ManualConfig(), func(d *harness.Delivery) sarama.ConsumerGroupHandler {
			return saramaledger.CommitFirst{DB: d.DB}
		}), cfg)
		got := failing(res)
		assert.Contains(t, got, faults.NameCrashMidJob, "a crash after the commit, before the credit, loses the payment: %s", res)
		assert.NotContains(t, got, faults.NameCrashBeforeAck, "the handler's own commit came before the crash: %s", res)
		assert.NotContains(t, got, faults.NameLostAck, "%s", res)
		assert.Subset(t, passed(res), []faults.Name{faults.NameCrashBeforeAck, faults.NameLostAck}, "%s", res)
	})
	t.Run("no inbox", func(t *testing.T) {
		res := run(t, saramaJob("sarama-no-inbox", saramaledger.Config(), func(d *harness.Delivery) sarama.ConsumerGroupHandler {
			return saramaledger.NoInbox{DB: d.DB}
		}), cfg)
		got := failing(res)
		assert.Contains(t, got, faults.NameCrashBeforeAck, "a crash before sarama's autocommit tick credits twice: %s", res)
		assert.Contains(t, got, faults.NameVisibilityTimeout, "the evicted worker's credit and the next owner's both land: %s", res)
		assert.NotContains(t, got, faults.NameLostAck, "sarama commits the marks when the session ends, which makes a lost tick good: %s", res)
		assert.Contains(t, passed(res), faults.NameLostAck, "%s", res)
	})
	t.Run("inbox", func(t *testing.T) {
		res := run(t, saramaJob("sarama-inbox", saramaledger.Config(), func(d *harness.Delivery) sarama.ConsumerGroupHandler {
			return saramaledger.Inbox{DB: d.DB}
		}), cfg)
		assert.True(t, res.Idempotent(), "%s", res)
		assert.Equal(t, result.Idempotent, res.Scenarios[0].Verdict)
	})
}
