package twicekafka_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	twicekafka "github.com/runtwice/twice/adapters/kafka"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// The conformance tests run each rule the adapter states twice: once with
// franz-go's own clients on a kfake cluster, as a production consumer
// runs (poll, handle, commit), and once through harness.Run, and require
// the same answer: is the record handed out again? Where the adapter's
// answer is a promise of every queue (a record not committed, or whose
// commit was lost, comes back under its ID), TestQueueConformance checks
// it, and the test here holds only franz-go to it.

const topic = "orders"

// broker is a kfake cluster for the real side of a conformance test.
type broker struct {
	c  *kfake.Cluster
	vn *kfake.VirtualNetwork
}

func newBroker(t *testing.T) *broker {
	t.Helper()
	vn := &kfake.VirtualNetwork{}
	c, err := kfake.NewCluster(kfake.ListenFn(vn.Listen), kfake.NumBrokers(1), kfake.Ports(9092), kfake.SeedTopics(1, topic))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return &broker{c: c, vn: vn}
}

func (b *broker) client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.c.ListenAddrs()...), kgo.Dialer(b.vn.DialContext)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// consumerOpts make a production consumer: group "g", autocommit
// disabled, from the start of the topic.
func consumerOpts() []kgo.Opt {
	return []kgo.Opt{kgo.ConsumerGroup("g"), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100 * time.Millisecond)}
}

// consumer is a production consumer (consumerOpts).
func (b *broker) consumer(t *testing.T) *kgo.Client {
	t.Helper()
	return b.client(t, consumerOpts()...)
}

func (b *broker) produce(t *testing.T, cl *kgo.Client, key, value string) *kgo.Record {
	t.Helper()
	r := &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(value)}
	require.NoError(t, cl.ProduceSync(context.Background(), r).FirstErr())
	return r
}

// poller is what polls records: a *kgo.Client or a
// *kgo.GroupTransactSession.
type poller interface {
	PollRecords(ctx context.Context, maxPollRecords int) kgo.Fetches
}

// first is the first record cl polls.
func first(t *testing.T, cl poller) *kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		fs := cl.PollRecords(ctx, 1)
		require.NoError(t, ctx.Err(), "no record polled")
		require.NoError(t, fs.Err())
		if rs := fs.Records(); len(rs) > 0 {
			return rs[0]
		}
	}
}

// the adapter's side: a consumer that writes the offset it handled.
var seenCfg = harness.Config{Setup: []harness.Setup{harness.SQL(`CREATE TABLE seen (n bigserial PRIMARY KEY, "offset" bigint NOT NULL)`)}}

func seenJob(opts ...twicekafka.Option) harness.Job {
	return twicekafka.Job("seen", twicekafka.Record{Topic: topic, Key: []byte("k"), Value: []byte("v")},
		func(d *harness.Delivery, _ *kgo.Client) twicekafka.Handler {
			return func(ctx context.Context, r *kgo.Record) error {
				_, err := d.DB.Exec(ctx, `INSERT INTO seen ("offset") VALUES ($1)`, r.Offset)
				return err
			}
		}, opts...)
}

// scenarios runs the adapter under one fault.
func scenarios(t *testing.T, f faults.Fault, opts ...twicekafka.Option) []result.Scenario {
	t.Helper()
	c := seenCfg
	c.Faults = []faults.Fault{f}
	res, err := harness.Run(context.Background(), seenJob(opts...), c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	require.NotEmpty(t, res.Scenarios)
	return res.Scenarios
}

// redelivered requires that under f the adapter hands the record to a
// second delivery in every scenario.
func redelivered(t *testing.T, f faults.Fault, opts ...twicekafka.Option) {
	t.Helper()
	for _, s := range scenarios(t, f, opts...) {
		require.Len(t, s.Deliveries, 2)
		assert.Empty(t, s.Deliveries[1].NotDelivered, "%s", s.Schedule)
	}
}

// A committed record is not handed out again: a restarted consumer starts
// after it.
func TestConformanceCommittedRecordIsNotRedelivered(t *testing.T) {
	b := newBroker(t)
	p := b.client(t)
	r0 := b.produce(t, p, "k", "v")
	c1 := b.consumer(t)
	got := first(t, c1)
	require.Equal(t, r0.Offset, got.Offset)
	require.NoError(t, c1.CommitRecords(context.Background(), got))
	c1.Close()
	r1 := b.produce(t, p, "sentinel", "")
	assert.Equal(t, r1.Offset, first(t, b.consumer(t)).Offset, "the restarted consumer starts after the committed record")

	for _, s := range scenarios(t, faults.RunTwice()) {
		require.Len(t, s.Deliveries, 2)
		assert.Contains(t, s.Deliveries[1].NotDelivered, "committed offset 1", "%s", s.Schedule)
	}
}

// A record handled and not committed (the worker died first) comes back
// to the next consumer of the group: queuetest's withheld-ack rule.
func TestConformanceUncommittedRecordIsRedelivered(t *testing.T) {
	b := newBroker(t)
	p := b.client(t)
	r0 := b.produce(t, p, "k", "v")
	c1 := b.consumer(t)
	require.Equal(t, r0.Offset, first(t, c1).Offset)
	c1.Close()
	assert.Equal(t, r0.Offset, first(t, b.consumer(t)).Offset)
}

// A commit the coordinator drops (kfake's ControlKey on OffsetCommit)
// fails the consumer's CommitRecords and commits nothing: the next
// consumer gets the record again, as the adapter's lost-ack says
// (queuetest's withheld-ack rule).
func TestConformanceLostCommitIsRedelivered(t *testing.T) {
	b := newBroker(t)
	p := b.client(t)
	r0 := b.produce(t, p, "k", "v")
	c1 := b.consumer(t)
	got := first(t, c1)
	b.c.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.c.KeepControl()
		return nil, errors.New("commit lost"), true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := c1.CommitRecords(ctx, got)
	t.Logf("CommitRecords with the commit dropped: %v", err)
	assert.Error(t, err)
	b.c.DropControl()
	c1.Close()
	assert.Equal(t, r0.Offset, first(t, b.consumer(t)).Offset)
}

// A rebalance that hands the partition to a second consumer while the
// first still handles the record: the second polls it from the committed
// offset, and the coordinator refuses the first one's commit.
func TestConformanceRebalanceMidRecord(t *testing.T) {
	b := newBroker(t)
	p := b.client(t)
	r0 := b.produce(t, p, "k", "v")
	c1 := b.consumer(t)
	got1 := first(t, c1)
	c1.LeaveGroup()
	c2 := b.consumer(t)
	got2 := first(t, c2)
	assert.Equal(t, r0.Offset, got2.Offset)
	err := c1.CommitRecords(context.Background(), got1)
	assert.True(t, errors.Is(err, kerr.UnknownMemberID), "the first consumer's commit: %v", err)
	require.NoError(t, c2.CommitRecords(context.Background(), got2))

	var refused int
	for _, s := range scenarios(t, faults.ConcurrentDelivery()) {
		require.GreaterOrEqual(t, len(s.Deliveries), 2, "%s", s.Schedule)
		assert.Empty(t, s.Deliveries[1].NotDelivered, "%s", s.Schedule)
		// Kafka refuses a member it no longer knows, or, once the second
		// consumer's commit and leave moved the group on, a stale
		// generation.
		if s.Deliveries[0].Err == "" && assert.Regexp(t, "commit refused: ("+kerr.UnknownMemberID.Message+"|"+kerr.IllegalGeneration.Message+")",
			s.Deliveries[0].Settled, "%s", s.Schedule) {
			refused++
		}
	}
	assert.Positive(t, refused)
}

// A producer's resend is a new record: a new offset, the same key and
// value, which a consumer handles after it committed the first.
func TestConformanceProducerRetryIsANewOffset(t *testing.T) {
	b := newBroker(t)
	p := b.client(t)
	r0 := b.produce(t, p, "k", "v")
	r1 := b.produce(t, p, "k", "v")
	assert.Equal(t, r0.Offset+1, r1.Offset)
	c1 := b.consumer(t)
	got := first(t, c1)
	require.NoError(t, c1.CommitRecords(context.Background(), got))
	c1.Close()
	again := first(t, b.consumer(t))
	assert.Equal(t, r1.Offset, again.Offset)
	assert.Equal(t, r0.Key, again.Key)
	assert.Equal(t, r0.Value, again.Value)

	for _, s := range scenarios(t, faults.ProducerRetry()) {
		require.Len(t, s.Deliveries, 2)
		assert.Equal(t, "orders/0/0", s.Deliveries[0].JobID)
		assert.Equal(t, "orders/0/1", s.Deliveries[1].JobID)
		assert.Empty(t, s.Deliveries[1].NotDelivered, "%s", s.Schedule)
	}
}

// Resetting the group's offset (kadm, with the group empty) hands a
// committed record out again.
func TestConformanceRedriveResetsTheOffset(t *testing.T) {
	b := newBroker(t)
	p := b.client(t)
	r0 := b.produce(t, p, "k", "v")
	c1 := b.consumer(t)
	got := first(t, c1)
	require.NoError(t, c1.CommitRecords(context.Background(), got))
	c1.Close()
	var reset kadm.Offsets
	reset.AddOffset(topic, 0, r0.Offset, -1)
	resp, err := kadm.NewClient(p).CommitOffsets(context.Background(), "g", reset)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	assert.Equal(t, r0.Offset, first(t, b.consumer(t)).Offset)

	redelivered(t, faults.Redrive(72*time.Hour))
}

func (b *broker) session(t *testing.T, id string) *kgo.GroupTransactSession {
	t.Helper()
	opts := append([]kgo.Opt{kgo.SeedBrokers(b.c.ListenAddrs()...), kgo.Dialer(b.vn.DialContext),
		kgo.TransactionalID(id), kgo.FetchIsolationLevel(kgo.ReadCommitted())}, consumerOpts()...)
	s, err := kgo.NewGroupTransactSession(opts...)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// Kafka's exactly-once loop: a committed transaction carries the offset;
// one that never ended (the worker died) or that lost its partition in a
// rebalance (End reports it not committed) leaves the record to the next
// consumer. The adapter's CommitTransactional says the same.
func TestConformanceTransactional(t *testing.T) {
	b := newBroker(t)
	p := b.client(t)
	r0 := b.produce(t, p, "k", "v")

	dead := b.session(t, "t1")
	require.Equal(t, r0.Offset, first(t, dead).Offset)
	require.NoError(t, dead.Begin())
	dead.Close() // dies inside its transaction

	moved := b.session(t, "t2")
	require.Equal(t, r0.Offset, first(t, moved).Offset, "a transaction that never ended committed nothing")
	require.NoError(t, moved.Begin())
	moved.Client().LeaveGroup() // the partition moves mid-record
	committed, err := moved.End(context.Background(), kgo.TryCommit)
	t.Logf("End after the partition moved: committed %v, %v", committed, err)
	assert.False(t, committed)

	ok := b.session(t, "t3")
	got := first(t, ok)
	require.Equal(t, r0.Offset, got.Offset, "the aborted transaction committed nothing")
	require.NoError(t, ok.Begin())
	committed, err = ok.End(context.Background(), kgo.TryCommit)
	require.NoError(t, err)
	require.True(t, committed)
	ok.Close()
	r1 := b.produce(t, p, "sentinel", "")
	assert.Equal(t, r1.Offset, first(t, b.session(t, "t4")).Offset, "the committed transaction carried the offset")

	tx := twicekafka.CommitMode(twicekafka.CommitTransactional)
	redelivered(t, faults.CrashBeforeAck(), tx)
	for _, s := range scenarios(t, faults.RunTwice(), tx) {
		require.Len(t, s.Deliveries, 2)
		assert.Contains(t, s.Deliveries[0].Settled, "transaction committed", "%s", s.Schedule)
		assert.Contains(t, s.Deliveries[1].NotDelivered, "committed offset 1", "%s", s.Schedule)
	}
	var aborted int
	for _, s := range scenarios(t, faults.ConcurrentDelivery(), tx) {
		if s.Deliveries[0].Err == "" && assert.Contains(t, s.Deliveries[0].Settled, "transaction aborted", "%s", s.Schedule) {
			aborted++
		}
	}
	assert.Positive(t, aborted)
}
