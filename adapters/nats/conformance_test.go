package twicenats

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Conformance: what the adapter says the server does is what the embedded
// nats-server and the real client do, with the server's own timers.

var testStreams atomic.Int64

// testStream makes a stream of its own on the embedded server.
func testStream(t *testing.T, dup time.Duration) (jetstream.JetStream, jetstream.Stream, string) {
	t.Helper()
	nc, err := connection()
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	n := testStreams.Add(1)
	subject := fmt.Sprintf("conf%d.msg", n)
	s, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: fmt.Sprintf("CONF_%d", n), Subjects: []string{subject}, Storage: jetstream.MemoryStorage, Duplicates: dup})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), s.CachedInfo().Config.Name) })
	return js, s, subject
}

func fetchOne(t *testing.T, c jetstream.Consumer, wait time.Duration) (jetstream.Msg, *jetstream.MsgMetadata) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	b, err := c.Fetch(1, jetstream.FetchContext(ctx))
	require.NoError(t, err)
	for m := range b.Messages() {
		md, err := m.Metadata()
		require.NoError(t, err)
		return m, md
	}
	return nil, nil
}

// The adapter's normalisation of AckWait, BackOff, MaxDeliver and the
// duplicate window is the server's: BackOff[0] overrides AckWait.
func TestTimingIsTheServers(t *testing.T) {
	cases := map[string]Spec{
		"defaults":             {},
		"ack wait":             {Consumer: jetstream.ConsumerConfig{AckWait: 5 * time.Minute, MaxDeliver: 4}},
		"backoff overrides it": {Consumer: jetstream.ConsumerConfig{AckWait: 5 * time.Minute, BackOff: []time.Duration{10 * time.Second, time.Minute}, MaxDeliver: 5}},
		"window":               {Stream: jetstream.StreamConfig{Duplicates: 10 * time.Minute}},
	}
	for name, spec := range cases {
		t.Run(name, func(t *testing.T) {
			_, s, _ := testStream(t, spec.Stream.Duplicates)
			c, err := s.CreateOrUpdateConsumer(t.Context(), spec.Consumer)
			require.NoError(t, err)
			got := c.CachedInfo().Config
			want := timingOf(spec)
			assert.Equal(t, want.ackWait, got.AckWait, "AckWait")
			assert.Equal(t, want.maxDeliver, got.MaxDeliver, "MaxDeliver")
			assert.Equal(t, want.backOff, got.BackOff, "BackOff")
			assert.Equal(t, want.duplicates, s.CachedInfo().Config.Duplicates, "Duplicates")
		})
	}
}

// With BackOff set, the server's own timer redelivers after BackOff[0]
// whatever AckWait says: an hour's AckWait and a 50ms BackOff[0] give a
// second delivery within the fetch's wait, the kannon bug as the server
// runs it.
func TestBackOffOverridesAckWaitOnTheServersClock(t *testing.T) {
	js, s, subject := testStream(t, 0)
	c, err := s.CreateOrUpdateConsumer(t.Context(), jetstream.ConsumerConfig{AckWait: time.Hour, BackOff: []time.Duration{50 * time.Millisecond, time.Hour}, MaxDeliver: 3})
	require.NoError(t, err)
	_, err = js.Publish(t.Context(), subject, []byte("x"))
	require.NoError(t, err)
	m1, md1 := fetchOne(t, c, fetchWait)
	require.NotNil(t, m1)
	assert.EqualValues(t, 1, md1.NumDelivered)
	m2, md2 := fetchOne(t, c, fetchWait) // m1 is never acked
	require.NotNil(t, m2, "the server redelivers after BackOff[0], not AckWait")
	assert.EqualValues(t, 2, md2.NumDelivered)
	assert.Equal(t, md1.Sequence.Stream, md2.Sequence.Stream)
	assert.Equal(t, 50*time.Millisecond, timingOf(Spec{Consumer: jetstream.ConsumerConfig{AckWait: time.Hour, BackOff: []time.Duration{50 * time.Millisecond, time.Hour}}}).redeliverAfter(1))
}

// The adapter's stand-in for the server's timer, a Nak on the message's
// reply subject, makes the server itself redeliver the message (its
// NumDelivered counts it); the first delivery's late ack still acks it
// (the server acks by stream sequence), after which nothing is pending.
func TestReleaseIsAServerRedelivery(t *testing.T) {
	js, s, subject := testStream(t, 0)
	c, err := s.CreateOrUpdateConsumer(t.Context(), jetstream.ConsumerConfig{AckWait: hold})
	require.NoError(t, err)
	_, err = js.Publish(t.Context(), subject, []byte("x"))
	require.NoError(t, err)
	m1, _ := fetchOne(t, c, fetchWait)
	require.NotNil(t, m1)
	require.NoError(t, js.Conn().Publish(m1.Reply(), []byte("-NAK")))
	m2, md2 := fetchOne(t, c, fetchWait)
	require.NotNil(t, m2)
	assert.EqualValues(t, 2, md2.NumDelivered)
	require.NoError(t, m1.DoubleAck(t.Context()), "the first delivery's ack")
	info, err := c.Info(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 0, info.NumAckPending, "acked by stream sequence: the second delivery holds nothing")
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	err = m2.DoubleAck(ctx)
	t.Logf("the second delivery's ack after the first's: %v", err)
}

// After MaxDeliver deliveries the server delivers the message no more,
// however it is released: the adapter's Discarded.
func TestMaxDeliverIsTheServers(t *testing.T) {
	js, s, subject := testStream(t, 0)
	c, err := s.CreateOrUpdateConsumer(t.Context(), jetstream.ConsumerConfig{AckWait: hold, MaxDeliver: 2})
	require.NoError(t, err)
	_, err = js.Publish(t.Context(), subject, []byte("x"))
	require.NoError(t, err)
	for n := 1; n <= 2; n++ {
		m, md := fetchOne(t, c, fetchWait)
		require.NotNil(t, m, "delivery %d", n)
		assert.EqualValues(t, n, md.NumDelivered)
		require.NoError(t, m.Nak())
	}
	b, err := c.FetchNoWait(1)
	require.NoError(t, err)
	got := 0
	for range b.Messages() {
		got++
	}
	assert.Zero(t, got, "past MaxDeliver")
}

// Nats-Msg-Id inside the duplicate window is refused by the stream; the
// adapter's late copy, past the window on the harness clock, is accepted
// once the server's own purge dropped the ID, and the window is put back.
func TestDuplicateWindow(t *testing.T) {
	js, s, subject := testStream(t, time.Hour)
	msg := func() *nats.Msg { return &nats.Msg{Subject: subject, Data: []byte("x")} }
	a1, err := js.PublishMsg(t.Context(), msg(), jetstream.WithMsgID("m-1"))
	require.NoError(t, err)
	a2, err := js.PublishMsg(t.Context(), msg(), jetstream.WithMsgID("m-1"))
	require.NoError(t, err)
	assert.True(t, a2.Duplicate)
	assert.Equal(t, a1.Sequence, a2.Sequence)
	q := &natsQueue{spec: Spec{Subject: subject, MsgID: "m-1"}}
	sc := &scenario{stream: s, js: js}
	a3, err := q.publish(t.Context(), sc, msg(), true, []jetstream.PublishOpt{jetstream.WithMsgID("m-1")})
	require.NoError(t, err)
	assert.False(t, a3.Duplicate)
	assert.Equal(t, a1.Sequence+1, a3.Sequence)
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	assert.Equal(t, time.Hour, info.Config.Duplicates)
}

// The adapter's refusal of an AckNone consumer is specific.
func TestCheckNamesTheField(t *testing.T) {
	err := (&natsQueue{name: "j", spec: Spec{Consumer: jetstream.ConsumerConfig{AckPolicy: jetstream.AckAllPolicy}}}).check()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Consumer.AckPolicy")
	assert.False(t, errors.Is(err, context.Canceled))
}
