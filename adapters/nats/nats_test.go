package twicenats_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twicenats "github.com/runtwice/twice/adapters/nats"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

var counts = harness.Config{Setup: []harness.Setup{harness.SQL(`CREATE TABLE hits (n int NOT NULL); INSERT INTO hits VALUES (0)`)}}

func spec(c jetstream.ConsumerConfig, msgID string) twicenats.Spec {
	return twicenats.Spec{Stream: jetstream.StreamConfig{Name: "HITS", Subjects: []string{"hits.>"}}, Consumer: c,
		Subject: "hits.one", Data: []byte(`{}`), MsgID: msgID}
}

// hit counts every delivery, then answers with answer.
func hit(answer func(jetstream.Msg)) func(*harness.Delivery) jetstream.MessageHandler {
	return func(d *harness.Delivery) jetstream.MessageHandler {
		return func(msg jetstream.Msg) {
			if _, err := d.DB.Exec(context.Background(), `UPDATE hits SET n = n + 1`); err != nil {
				return
			}
			answer(msg)
		}
	}
}

func ack(m jetstream.Msg) { _ = m.Ack() }

func run(t *testing.T, job harness.Job, c harness.Config) *harness.Result {
	t.Helper()
	res, err := harness.Run(context.Background(), job, c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	return res
}

func with(fs ...faults.Fault) harness.Config {
	c := counts
	c.Faults = fs
	return c
}

// The same Nats-Msg-Id inside the stream's duplicate window is refused by
// the server: the producer's copy is never delivered. Without one, the
// copy is a message of its own and counts again.
func TestProducerRetryAndNatsMsgID(t *testing.T) {
	res := run(t, twicenats.Job("hit", spec(jetstream.ConsumerConfig{}, "hit-1"), hit(ack)), with(faults.ProducerRetry()))
	require.Len(t, res.Scenarios, 1)
	s := res.Scenarios[0]
	assert.Equal(t, result.Idempotent, s.Verdict, "%s", res)
	assert.Contains(t, s.Deliveries[1].NotDelivered, `holds Nats-Msg-Id "hit-1"`)

	res = run(t, twicenats.Job("hit", spec(jetstream.ConsumerConfig{}, ""), hit(ack)), with(faults.ProducerRetry()))
	require.Len(t, res.Scenarios, 1)
	s = res.Scenarios[0]
	assert.NotEqual(t, result.Idempotent, s.Verdict, "a second message, a second hit")
	assert.Equal(t, "2", s.Deliveries[1].JobID, "the copy's stream sequence")
}

// A handler that never acks is delivered again until MaxDeliver, each
// time with the server's NumDelivered, and then the server gives up: the
// job did not complete.
func TestMaxDeliver(t *testing.T) {
	res, err := harness.Run(context.Background(), twicenats.Job("hit", spec(jetstream.ConsumerConfig{MaxDeliver: 3}, ""), hit(func(m jetstream.Msg) { _ = m.Nak() })), with(faults.RunTwice()))
	require.Error(t, err, "the clean run never completes")
	assert.Contains(t, err.Error(), "MaxDeliver (3) reached")
	_ = res
}

// Term ends the message on purpose: the job is complete and never
// delivered again. Like an Ack, a Term after the last statement is what a
// crash before the ack withholds.
func TestTerm(t *testing.T) {
	res := run(t, twicenats.Job("hit", spec(jetstream.ConsumerConfig{}, ""), hit(func(m jetstream.Msg) { _ = m.TermWithReason("bad data") })),
		with(faults.RunTwice(), faults.CrashBeforeAck()))
	require.Len(t, res.Scenarios, 2)
	for _, s := range res.Scenarios {
		switch s.Fault {
		case faults.NameRunTwice:
			assert.Equal(t, result.Idempotent, s.Verdict, "%s", res)
			assert.Contains(t, s.Deliveries[1].NotDelivered, "terminated by delivery 1")
		case faults.NameCrashBeforeAck:
			assert.NotEqual(t, result.Idempotent, s.Verdict, "the Term never reached the server")
		}
	}
}

// A Nak'd message comes back at once, as the server's second delivery;
// NakWithDelay waits its delay on the harness clock.
func TestNakRetries(t *testing.T) {
	job := twicenats.Job("hit", spec(jetstream.ConsumerConfig{}, ""), func(d *harness.Delivery) jetstream.MessageHandler {
		return func(msg jetstream.Msg) {
			md, err := msg.Metadata()
			if err != nil {
				return
			}
			if md.NumDelivered == 1 {
				_ = msg.NakWithDelay(time.Minute)
				return
			}
			_, _ = d.DB.Exec(context.Background(), `UPDATE hits SET n = n + 1`)
			_ = msg.Ack()
		}
	})
	res := run(t, job, with(faults.RunTwice()))
	require.Len(t, res.Scenarios, 1)
	s := res.Scenarios[0]
	require.GreaterOrEqual(t, len(s.Deliveries), 2, "%s", res)
	assert.Contains(t, s.Deliveries[0].Settled, "NakWithDelay: the server delivers it again in 1m")
	assert.Equal(t, 2, s.Deliveries[1].Attempt)
	assert.True(t, res.Idempotent(), "%s", res)
}

// The ack-before-work consumer and a crash-before-ack: an Ack followed by
// a statement was on the wire before it, so the crash after the last
// step withholds nothing; an Ack after the last statement is the one the
// crash withholds.
func TestAnAckFollowedByAStatementIsSent(t *testing.T) {
	first := func(d *harness.Delivery) jetstream.MessageHandler {
		return func(msg jetstream.Msg) {
			_ = msg.Ack()
			_, _ = d.DB.Exec(context.Background(), `UPDATE hits SET n = n + 1`)
		}
	}
	res := run(t, twicenats.Job("hit", spec(jetstream.ConsumerConfig{}, ""), first), with(faults.CrashBeforeAck()))
	require.Len(t, res.Scenarios, 1)
	assert.Contains(t, res.Scenarios[0].Deliveries[1].NotDelivered, "acked by delivery 1", "%s", res)

	res = run(t, twicenats.Job("hit", spec(jetstream.ConsumerConfig{}, ""), hit(ack)), with(faults.CrashBeforeAck()))
	require.Len(t, res.Scenarios, 1)
	s := res.Scenarios[0]
	require.GreaterOrEqual(t, len(s.Deliveries), 2, "%s", res)
	assert.Empty(t, s.Deliveries[1].NotDelivered)
	assert.Equal(t, 2, s.Deliveries[1].Attempt, "the server's NumDelivered")
	assert.NotEqual(t, result.Idempotent, s.Verdict, "the hit is counted twice")
}

// Misuse fails at once, saying what to change.
func TestAckPolicyMustBeExplicit(t *testing.T) {
	_, err := harness.Run(context.Background(), twicenats.Job("hit", spec(jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy}, ""), hit(ack)), with(faults.RunTwice()))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "AckExplicitPolicy")
}

// A handler that leaves its transaction open does not hang the delivery
// (its pool is not closed under it): the harness cuts the connection, the
// write rolls back, and the ack stands.
func TestTransactionLeftOpen(t *testing.T) {
	job := twicenats.Job("hit", spec(jetstream.ConsumerConfig{}, ""), func(d *harness.Delivery) jetstream.MessageHandler {
		return func(msg jetstream.Msg) {
			tx, err := d.DB.Begin(context.Background())
			if err != nil {
				return
			}
			_, _ = tx.Exec(context.Background(), `UPDATE hits SET n = n + 1`)
			_ = msg.Ack()
		}
	})
	cfg := with(faults.RunTwice())
	cfg.ExpectNoWork = "its only write rolls back"
	cfg.AcceptWarnings = []result.WarningKind{result.TransactionLeftOpen}
	res := run(t, job, cfg)
	assert.True(t, res.Idempotent(), "%s", res)
	var rows []string
	for _, tb := range res.Reference.Tables {
		if tb.Name == "hits" {
			rows = append(rows, fmt.Sprint(tb.Rows))
		}
	}
	assert.Equal(t, []string{"[[0]]"}, rows, "the open transaction rolled back")
	require.Len(t, res.Scenarios, 1)
	assert.Contains(t, res.Scenarios[0].Deliveries[1].NotDelivered, "acked by delivery 1")
}
