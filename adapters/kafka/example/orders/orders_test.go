package orders_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	twicekafka "github.com/runtwice/twice/adapters/kafka"
	"github.com/runtwice/twice/adapters/kafka/example/orders"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

var cfg = harness.Config{Setup: []harness.Setup{harness.SQL(orders.Schema)}}

var paid = twicekafka.Record{Topic: orders.Topic, Key: []byte("order-9812"), Value: []byte(`{"order_id":9812,"amount_cents":1500}`)}

func run(t *testing.T, job harness.Job) *harness.Result {
	t.Helper()
	res, err := harness.Run(context.Background(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	return res
}

// failed lists the faults with a scenario that is not idempotent.
func failed(res *harness.Result) []faults.Name {
	var out []faults.Name
	for _, s := range res.Scenarios {
		if s.Verdict != result.Idempotent && !slices.Contains(out, s.Fault) {
			out = append(out, s.Fault)
		}
	}
	slices.Sort(out)
	return out
}

func names(ns ...faults.Name) []faults.Name {
	slices.Sort(ns)
	return ns
}

func commitFirst() harness.Job {
	return twicekafka.Job("commit-first", paid, func(d *harness.Delivery, cl *kgo.Client) twicekafka.Handler {
		return orders.CommitFirst{DB: d.DB, Client: cl}.Handle
	}, twicekafka.CommitMode(twicekafka.CommitInHandler))
}

func writeThenCommit() harness.Job {
	return twicekafka.Job("write-then-commit", paid, func(d *harness.Delivery, _ *kgo.Client) twicekafka.Handler {
		return orders.WriteThenCommit{DB: d.DB}.Handle
	})
}

func inboxByOffset() harness.Job {
	return twicekafka.Job("inbox-by-offset", paid, func(d *harness.Delivery, _ *kgo.Client) twicekafka.Handler {
		return orders.InboxByOffset{DB: d.DB}.Handle
	})
}

func inboxByKey() harness.Job {
	return twicekafka.Job("inbox-by-key", paid, func(d *harness.Delivery, _ *kgo.Client) twicekafka.Handler {
		return orders.InboxByKey{DB: d.DB}.Handle
	})
}

// Every default fault's verdict for each consumer, as the package doc
// says: a fault is listed when one of its scenarios is not idempotent.
func TestVerdicts(t *testing.T) {
	producerCopies := []faults.Name{faults.NameProducerRetry, faults.NameConcurrentProducerRetry}
	for _, tc := range []struct {
		job  harness.Job
		want []faults.Name
	}{
		// The crash after the commit and before the write loses the
		// line; a producer's resend and a redrive write it again.
		{commitFirst(), names(faults.NameCrashMidJob, faults.NameRedrive, faults.NameProducerRetry, faults.NameConcurrentProducerRetry)},
		// Every redelivery before the commit writes the line twice.
		{writeThenCommit(), names(faults.NameProducerRetry, faults.NameConcurrentProducerRetry, faults.NameCrashBeforeAck,
			faults.NameLostAck, faults.NameAmbiguousCommit, faults.NameVisibilityTimeout, faults.NameConcurrentDelivery, faults.NameRedrive)},
		// The offset inbox holds against every redelivery of the record,
		// not against the producer's resend at a new offset.
		{inboxByOffset(), names(producerCopies...)},
		{inboxByKey(), nil},
		// The receipt sent after the inbox commit is lost by a crash, a
		// lost reply or a failed send between the two.
		{receipt(), names(faults.NameCrashMidJob, faults.NameAmbiguousCommit, faults.NameEffectFailed, faults.NameRedrive)},
		// Kafka's transaction holds the receipt and the offset, not the
		// PostgreSQL line: every redelivery writes it again.
		{transactional(), names(faults.NameProducerRetry, faults.NameConcurrentProducerRetry, faults.NameCrashBeforeAck,
			faults.NameLostAck, faults.NameAmbiguousCommit, faults.NameVisibilityTimeout, faults.NameConcurrentDelivery, faults.NameRedrive)},
	} {
		t.Run(tc.job.Name, func(t *testing.T) {
			res := run(t, tc.job)
			assert.Equal(t, tc.want, failed(res), "%s", res)
		})
	}
}

// The committed offset decides: after a crash between CommitFirst's
// commit and its write, Kafka hands the record out no more, and the line
// is lost; the finding says the ack (the commit) came before the work.
func TestCommitFirstLosesTheLine(t *testing.T) {
	res := run(t, commitFirst())
	var lost int
	for _, s := range res.Scenarios {
		if s.Fault != faults.NameCrashMidJob {
			continue
		}
		require.Len(t, s.Deliveries, 2, "%s", s.Schedule)
		assert.Contains(t, s.Deliveries[1].NotDelivered, "committed offset 1", "%s", s.Schedule)
		assert.Equal(t, result.NotIdempotent, s.Verdict, "%s", s.Schedule)
		require.NotEmpty(t, s.Culprits, "%s", s.Schedule)
		assert.Equal(t, result.AckBeforeWork, s.Culprits[0].Pattern, "%s", s.Schedule)
		lost++
	}
	assert.Positive(t, lost)
	c := cfg
	c.ExpectFinding = "the offset is committed before the line is written: a crash between loses it"
	c.ExpectPattern = result.AckBeforeWork
	harness.Check(t, commitFirst(), c)
}

// CommitFirst commits from inside its handler, outside the schedule: the
// copy's Fetch made while the first handler runs reads a committed
// offset that handler may or may not have moved yet (one line or two).
// The run records that race, so a pass is run again instead of resting
// on which came first.
func TestHandlerCommitBesideFetchIsARace(t *testing.T) {
	sched, err := faults.Parse("j1a1w1 > j2a1w2@1:0 order 2,1")
	require.NoError(t, err)
	c := cfg
	c.Faults = []faults.Fault{faults.Replay(sched)}
	res, err := harness.Run(context.Background(), commitFirst(), c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	require.Len(t, res.Scenarios, 1)
	sc := res.Scenarios[0]
	assert.Contains(t, sc.Races, result.Race{Kind: result.SettledBeside, Delivery: 2, Other: 1}, "%s", res)
	assert.NotNil(t, sc.Rerun, "a scenario that raced runs again")
}

// The checks a team would write: harness.Check with no Kafka-specific
// call, and Explore.
func TestInboxByKey(t *testing.T) {
	harness.Check(t, inboxByKey(), cfg)
	x := harness.Explore(t, inboxByKey(), cfg, harness.ExploreOptions{Checks: 5, Dir: t.TempDir()})
	assert.False(t, x.Failed(), "%+v", x)
	assert.Positive(t, x.Executed)
}

func TestWriteThenCommit(t *testing.T) {
	c := cfg
	c.ExpectFinding = "the line is written before the offset commit: a redelivery writes it again"
	c.ExpectPattern = result.InsertWithoutKey
	harness.Check(t, writeThenCommit(), c)
}

func receipt() harness.Job {
	return twicekafka.Job("receipt", paid, func(d *harness.Delivery, cl *kgo.Client) twicekafka.Handler {
		return orders.Receipt{DB: d.DB, Out: twicekafka.Outbox(d, cl)}.Handle
	})
}

// The receipt is a record to another topic, an effect: the clean run
// sends one, and a crash after the inbox commit and before the send
// loses it, which the effect oracle finds.
func TestReceiptLostAfterTheCommit(t *testing.T) {
	res := run(t, receipt())
	require.Len(t, res.ReferenceEffects, 1, "%s", res)
	assert.Equal(t, "kafka:"+orders.ReceiptsTopic, res.ReferenceEffects[0].Kind)
	assert.Contains(t, failed(res), faults.NameCrashMidJob, "%s", res)
	var missing bool
	for _, s := range res.Scenarios {
		if s.Fault == faults.NameCrashMidJob && s.EffectDiff != nil && len(s.Effects) == 0 {
			missing = true
		}
	}
	assert.True(t, missing, "a crash before the send leaves no receipt: %s", res)
}

func transactional() harness.Job {
	return twicekafka.Job("transactional", paid, func(d *harness.Delivery, cl *kgo.Client) twicekafka.Handler {
		return orders.Transactional{DB: d.DB, Out: cl}.Handle
	}, twicekafka.CommitMode(twicekafka.CommitTransactional))
}
