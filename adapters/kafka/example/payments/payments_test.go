package payments_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	twicekafka "github.com/runtwice/twice/adapters/kafka"
	"github.com/runtwice/twice/adapters/kafka/example/payments"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

var record = twicekafka.Record{Topic: payments.Topic, Key: []byte("pay-1"), Value: []byte(`{"payment_id":"pay-1","account":7,"amount":50}`)}

var cfg = harness.Config{Setup: []harness.Setup{harness.SQL(payments.Schema)}}

// loopJob checks a loop as written, on a client from its own options.
func loopJob(name string, opts []kgo.Opt, loop func(payments.Consumer) twicekafka.Loop) harness.Job {
	return twicekafka.LoopJob(name, record, opts, func(d *harness.Delivery) twicekafka.Loop {
		return loop(payments.Consumer{DB: d.DB})
	})
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

// A loop holds its client and commits when it likes, outside the
// schedule: a producer's copy fetched while the first delivery's loop
// runs reads a committed offset that loop may or may not have moved
// yet. The run records that race, so a pass is run again.
func TestLoopCommitBesideFetchIsARace(t *testing.T) {
	sched, err := faults.Parse("j1a1w1 > j2a1w2@1:0")
	require.NoError(t, err)
	c := cfg
	c.Faults = []faults.Fault{faults.Replay(sched)}
	res := run(t, loopJob("inbox-content", payments.ManualCommit(), func(c payments.Consumer) twicekafka.Loop { return c.InboxByContent }), c)
	require.Len(t, res.Scenarios, 1)
	sc := res.Scenarios[0]
	assert.Contains(t, sc.Races, result.Race{Kind: result.SettledBeside, Delivery: 2, Other: 1}, "%s", res)
	assert.NotNil(t, sc.Rerun, "a scenario that raced runs again")
}

// Each loop is checked from its own code under the default matrix.
func TestLoopsAsWritten(t *testing.T) {
	t.Run("commit first", func(t *testing.T) {
		res := run(t, loopJob("commit-first", payments.ManualCommit(), func(c payments.Consumer) twicekafka.Loop { return c.CommitFirst }), cfg)
		assert.Contains(t, failing(res), faults.NameCrashMidJob, "a crash after the commit, before the credit, loses the payment: %s", res)
	})
	t.Run("autocommit", func(t *testing.T) {
		res := run(t, loopJob("autocommit", payments.AutoCommit(), func(c payments.Consumer) twicekafka.Loop { return c.AutoCommitted }), cfg)
		assert.Contains(t, failing(res), faults.NameCrashBeforeAck, "a crash before kgo's tick credits twice: %s", res)
	})
	t.Run("inbox by offset", func(t *testing.T) {
		res := run(t, loopJob("inbox-offset", payments.ManualCommit(), func(c payments.Consumer) twicekafka.Loop { return c.InboxByOffset }), cfg)
		got := failing(res)
		assert.Contains(t, got, faults.NameProducerRetry, "%s", res)
		for _, f := range got {
			assert.Contains(t, []faults.Name{faults.NameProducerRetry, faults.NameConcurrentProducerRetry}, f, "only a producer's retry is a new offset: %s", res)
		}
	})
	t.Run("follow-up before commit", func(t *testing.T) {
		res := run(t, loopJob("follow-up", payments.ManualCommit(), func(c payments.Consumer) twicekafka.Loop { return c.NotifyBeforeCommit }), cfg)
		// The record the loop produced with its own client is an effect,
		// seen at the broker.
		if assert.Len(t, res.ReferenceEffects, 1, "%s", res) {
			assert.Equal(t, "kafka:"+payments.CreditedTopic, res.ReferenceEffects[0].Kind)
			assert.JSONEq(t, `{"key":"pay-1","value":"{\"payment_id\":\"pay-1\",\"account\":7,\"amount\":50}"}`, string(res.ReferenceEffects[0].Payload))
		}
		assert.Contains(t, failing(res), faults.NameCrashMidJob, "a crash before COMMIT, after the produce, tells the receipt service twice: %s", res)
		var dup bool
		for _, sc := range res.Failed() {
			for _, p := range sc.Problems {
				dup = dup || p.Kind == result.EffectsDiffer
			}
		}
		assert.True(t, dup, "the finding is the effect's: %s", res)
	})
	t.Run("inbox by content", func(t *testing.T) {
		// With the record as data, every copy is the same bytes.
		res := run(t, loopJob("inbox-content", payments.ManualCommit(), func(c payments.Consumer) twicekafka.Loop { return c.InboxByContent }), cfg)
		assert.True(t, res.Idempotent(), "%s", res)
	})
	t.Run("inbox by content, the producer's own code", func(t *testing.T) {
		// Publish stamps each send with the harness clock: the retry,
		// 5s later, is other bytes.
		job := twicekafka.LoopJob("inbox-content-published", twicekafka.Record{Topic: payments.Topic}, payments.ManualCommit(),
			func(d *harness.Delivery) twicekafka.Loop { return payments.Consumer{DB: d.DB}.InboxByContent },
			twicekafka.Produce(func(ctx context.Context, p twicekafka.Producing) error {
				return payments.Publish(ctx, p.Client, p.Now(), payments.Payment{ID: "pay-1", Account: 7, Amount: 50})
			}))
		res := run(t, job, cfg)
		got := failing(res)
		assert.Contains(t, got, faults.NameLateProducerRetry, "%s", res)
		for _, f := range got {
			assert.Contains(t, []faults.Name{faults.NameProducerRetry, faults.NameConcurrentProducerRetry, faults.NameLateProducerRetry}, f, "only a producer's retry is new bytes: %s", res)
		}
	})
	t.Run("inbox by payment", func(t *testing.T) {
		res := run(t, loopJob("inbox-payment", payments.ManualCommit(), func(c payments.Consumer) twicekafka.Loop { return c.InboxByPayment }), cfg)
		assert.True(t, res.Idempotent(), "%s", res)
		assert.Equal(t, result.Idempotent, res.Scenarios[0].Verdict)
	})
}
