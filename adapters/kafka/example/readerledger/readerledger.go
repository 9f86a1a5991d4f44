// Package readerledger is production Kafka consumer code written with
// segmentio/kafka-go: two Reader loops that credit a payment to its
// account. It never imports twice; its tests check each loop as written
// with twice's Kafka adapter (twicekafka.ReaderJob).
package readerledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
)

// Topic is the topic payments are produced to; Group the consumers' group.
const (
	Topic = "payments"
	Group = "ledger"
)

// Schema is the tables the consumers use.
const Schema = `
CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL);
CREATE TABLE ledger (id bigserial PRIMARY KEY, payment_id text NOT NULL, account_id bigint NOT NULL, amount bigint NOT NULL);
CREATE TABLE inbox (payment_id text PRIMARY KEY);
INSERT INTO accounts VALUES (7, 0);
`

// Config is the Reader's config as the service builds it (without its
// brokers): a consumer group with synchronous commits.
func Config() kafka.ReaderConfig {
	return kafka.ReaderConfig{GroupID: Group, Topic: Topic, StartOffset: kafka.FirstOffset}
}

// Payment is a message's value.
type Payment struct {
	ID      string `json:"payment_id"`
	Account int64  `json:"account"`
	Amount  int64  `json:"amount"`
}

// Consumer holds the loops' dependencies.
type Consumer struct{ DB *pgxpool.Pool }

func payment(m kafka.Message) (Payment, error) {
	var p Payment
	if err := json.Unmarshal(m.Value, &p); err != nil {
		return p, fmt.Errorf("message %s[%d]@%d: %w", m.Topic, m.Partition, m.Offset, err)
	}
	return p, nil
}

// credit writes the payment's ledger line and adds it to the balance, in
// tx.
func credit(ctx context.Context, tx pgx.Tx, p Payment) error {
	if _, err := tx.Exec(ctx, `INSERT INTO ledger (payment_id, account_id, amount) VALUES ($1, $2, $3)`, p.ID, p.Account, p.Amount); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + $1 WHERE id = $2`, p.Amount, p.Account)
	return err
}

// consume is the loops' read loop: it reads each message with read (the
// Reader's ReadMessage or FetchMessage) and hands it and its payment to
// handle. It returns nil once the Reader is closed or the service is
// shutting down.
func consume(ctx context.Context, read func(context.Context) (kafka.Message, error), handle func(kafka.Message, Payment) error) error {
	for {
		m, err := read(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		p, err := payment(m)
		if err != nil {
			return err
		}
		if err := handle(m, p); err != nil {
			return err
		}
	}
}

// ReadThenCredit reads each message with ReadMessage, which in a group
// commits its offset before it returns it, then credits it: a crash
// between the commit and the credit loses the payment.
func (c Consumer) ReadThenCredit(ctx context.Context, r *kafka.Reader) error {
	return consume(ctx, r.ReadMessage, func(_ kafka.Message, p Payment) error {
		return pgx.BeginFunc(ctx, c.DB, func(tx pgx.Tx) error { return credit(ctx, tx, p) })
	})
}

// InboxThenCommit fetches each message, records its payment ID in an
// inbox in the credit's transaction (skipping a payment it has seen),
// and only then commits the offset: a redelivery or a producer's resend
// of the same payment credits nothing.
func (c Consumer) InboxThenCommit(ctx context.Context, r *kafka.Reader) error {
	return consume(ctx, r.FetchMessage, func(m kafka.Message, p Payment) error {
		err := pgx.BeginFunc(ctx, c.DB, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `INSERT INTO inbox VALUES ($1) ON CONFLICT DO NOTHING`, p.ID)
			if err != nil || tag.RowsAffected() == 0 {
				return err
			}
			return credit(ctx, tx, p)
		})
		if err != nil {
			return err
		}
		return r.CommitMessages(ctx, m)
	})
}
