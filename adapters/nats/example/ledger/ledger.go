// Package ledger is a JetStream consumer that credits accounts in
// PostgreSQL, three ways: the production code of twicenats's examples. It
// never imports twice; ledger_test.go checks it.
//
// A producer publishes a Credit to subject "ledger.credit" on stream
// LEDGER with a Nats-Msg-Id; a pull consumer "crediter" hands each message
// to a jetstream.MessageHandler:
//
//   - Inbox (correct): the credit and an inbox row keyed by the message ID
//     commit in one transaction, then the message is acked. A redelivery,
//     a late producer copy or an overlapping delivery finds the inbox row
//     (or waits on it) and only acks. With BySequence the inbox is keyed
//     by the stream sequence instead: correct only while every copy of a
//     message comes within the stream's duplicate window (2 minutes),
//     which drops it; a copy after that is a new message.
//   - AckFirst (broken): acks, then writes. A crash after the ack loses
//     the credit: the server never delivers the message again.
//   - Checked (broken, the kannon-email/kannon PR #427 shape): it reads
//     the inbox before it credits, in separate statements, trusting that
//     AckWait (5 minutes) is longer than any credit takes, so no two
//     deliveries of a message overlap. Its consumer sets BackOff for
//     retries, and the server then runs AckWait as BackOff[0] (10s): a
//     slow credit is delivered again while it still runs, and both credit.
package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Schema is the consumer's tables.
const Schema = `
CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL);
CREATE TABLE inbox (message_id text PRIMARY KEY);
CREATE TABLE seen (message_id text NOT NULL);
INSERT INTO accounts VALUES (7, 0);
`

// Credit is the message.
type Credit struct {
	Account int64 `json:"account"`
	Amount  int64 `json:"amount"`
}

// Stream is the production stream.
var Stream = jetstream.StreamConfig{Name: "LEDGER", Subjects: []string{"ledger.>"}}

// Subject is where credits are published.
const Subject = "ledger.credit"

// Consumer is the correct consumers' pull consumer: five minutes to ack.
var Consumer = jetstream.ConsumerConfig{Durable: "crediter", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Minute, MaxDeliver: 5}

// RetryingConsumer is Checked's consumer: the same AckWait, and a BackOff
// meant to space out retries, which the server takes as the AckWait of
// each delivery instead (BackOff[0] for the first).
var RetryingConsumer = jetstream.ConsumerConfig{Durable: "crediter", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Minute,
	BackOff: []time.Duration{10 * time.Second, time.Minute, 5 * time.Minute}, MaxDeliver: 5}

// messageID is the message's Nats-Msg-Id, or its stream sequence when the
// producer sent none.
func messageID(msg jetstream.Msg) (string, error) {
	if id := msg.Headers().Get(jetstream.MsgIDHeader); id != "" {
		return id, nil
	}
	return sequence(msg)
}

// sequence is the message's stream and sequence in it.
func sequence(msg jetstream.Msg) (string, error) {
	md, err := msg.Metadata()
	if err != nil {
		return "", err
	}
	return md.Stream + "/" + strconv.FormatUint(md.Sequence.Stream, 10), nil
}

// decode is the message's credit. A message that never decodes is
// never retried: decode terminates it, and ok is false.
func decode(msg jetstream.Msg) (c Credit, ok bool) {
	if err := json.Unmarshal(msg.Data(), &c); err != nil {
		_ = msg.Term()
		return c, false
	}
	return c, true
}

// Inbox credits once per message ID, or per stream sequence.
type Inbox struct {
	DB *pgxpool.Pool
	// BySequence keys the inbox by the message's stream sequence, trusting
	// the stream's duplicate window to drop the producer's retries.
	BySequence bool
}

// Handle is the MessageHandler.
func (h Inbox) Handle(msg jetstream.Msg) {
	ctx := context.Background()
	c, ok := decode(msg)
	if !ok {
		return
	}
	id, err := messageID(msg)
	if h.BySequence {
		id, err = sequence(msg)
	}
	if err != nil {
		_ = msg.Nak()
		return
	}
	err = pgx.BeginFunc(ctx, h.DB, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO inbox (message_id) VALUES ($1) ON CONFLICT DO NOTHING`, id)
		if err != nil || tag.RowsAffected() == 0 {
			return err // seen before: nothing to do but ack
		}
		_, err = tx.Exec(ctx, `UPDATE accounts SET balance = balance + $2 WHERE id = $1`, c.Account, c.Amount)
		return err
	})
	if err != nil {
		_ = msg.Nak()
		return
	}
	_ = msg.Ack()
}

// AckFirst acks before it writes.
type AckFirst struct{ DB *pgxpool.Pool }

// Handle is the MessageHandler.
func (h AckFirst) Handle(msg jetstream.Msg) {
	ctx := context.Background()
	c, ok := decode(msg)
	if !ok {
		return
	}
	_ = msg.Ack() // "so the server does not redeliver while we work"
	_, _ = h.DB.Exec(ctx, `UPDATE accounts SET balance = balance + $2 WHERE id = $1`, c.Account, c.Amount)
}

// Checked reads the inbox, then credits and records the message in one
// transaction; the inbox has no unique key, as no two deliveries were
// meant to overlap.
type Checked struct{ DB *pgxpool.Pool }

// Handle is the MessageHandler.
func (h Checked) Handle(msg jetstream.Msg) {
	ctx := context.Background()
	c, ok := decode(msg)
	if !ok {
		return
	}
	id, err := messageID(msg)
	if err != nil {
		_ = msg.Nak()
		return
	}
	var seen bool
	if err := h.DB.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM seen WHERE message_id = $1)`, id).Scan(&seen); err != nil {
		_ = msg.Nak()
		return
	}
	if !seen {
		err = pgx.BeginFunc(ctx, h.DB, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + $2 WHERE id = $1`, c.Account, c.Amount); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO seen (message_id) VALUES ($1)`, id)
			return err
		})
		if err != nil {
			_ = msg.Nak()
			return
		}
	}
	_ = msg.Ack()
}

// Publish is the producer.
func Publish(ctx context.Context, js jetstream.JetStream, id string, c Credit) (*jetstream.PubAck, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: Subject, Data: data}, jetstream.WithMsgID(id))
	if err != nil {
		return nil, fmt.Errorf("publishing credit %s: %w", id, err)
	}
	return ack, nil
}
