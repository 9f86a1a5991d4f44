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

	"github.com/runtwice/twice/adapters/kafka/example/ledger"
)

// Topic is the topic payments are produced to; Group the consumers' group.
const (
	Topic = "payments"
	Group = "ledger"
)

// Schema is the tables the consumers use: the ledger's.
const Schema = ledger.Schema

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
		return pgx.BeginFunc(ctx, c.DB, func(tx pgx.Tx) error {
			return ledger.Credit(ctx, tx, p.ID, p.Account, p.Amount)
		})
	})
}

// InboxThenCommit fetches each message, records its payment ID in an
// inbox in the credit's transaction (skipping a payment it has seen),
// and only then commits the offset: a redelivery or a producer's resend
// of the same payment credits nothing.
func (c Consumer) InboxThenCommit(ctx context.Context, r *kafka.Reader) error {
	return consume(ctx, r.FetchMessage, func(m kafka.Message, p Payment) error {
		err := pgx.BeginFunc(ctx, c.DB, func(tx pgx.Tx) error {
			_, err := ledger.CreditOnce(ctx, tx, p.ID, p.Account, p.Amount)
			return err
		})
		if err != nil {
			return err
		}
		return r.CommitMessages(ctx, m)
	})
}
