// Package saramaledger is production Kafka consumer code: sarama
// consumer group handlers (sarama.ConsumerGroupHandler) that credit a
// payment to its account, each as a team might write it with
// github.com/IBM/sarama. It never imports twice; its tests check each
// handler as written with twice's Kafka adapter (twicekafka.SaramaJob).
package saramaledger

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runtwice/twice/adapters/kafka/example/ledger"
)

// Topic is the topic payments are produced to; Group the consumers' group.
const (
	Topic = "payments"
	Group = "ledger"
)

// Schema is the tables the handlers use: the ledger's.
const Schema = ledger.Schema

// Payment is a record's value.
type Payment struct {
	ID      string `json:"payment_id"`
	Account int64  `json:"account"`
	Amount  int64  `json:"amount"`
}

// Config is the consumers' sarama config: sarama's defaults (autocommit
// of marked offsets every second), reading a new group from the oldest
// offset.
func Config() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	return cfg
}

// ManualConfig is Config with autocommit disabled: the handler commits
// with session.Commit.
func ManualConfig() *sarama.Config {
	cfg := Config()
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	return cfg
}

func payment(m *sarama.ConsumerMessage) (Payment, error) {
	var p Payment
	if err := json.Unmarshal(m.Value, &p); err != nil {
		return p, fmt.Errorf("record %s[%d]@%d: %w", m.Topic, m.Partition, m.Offset, err)
	}
	return p, nil
}

// credit credits the payment in a transaction of its own.
func credit(ctx context.Context, db *pgxpool.Pool, p Payment) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { return ledger.Credit(ctx, tx, p.ID, p.Account, p.Amount) })
}

// eachPayment decodes each record of the claim in turn and hands it to
// handle, until the claim's channel is closed or handle fails. handle's
// context is not the session's: see Inbox.
func eachPayment(claim sarama.ConsumerGroupClaim, handle func(context.Context, *sarama.ConsumerMessage, Payment) error) error {
	ctx := context.Background()
	for msg := range claim.Messages() {
		p, err := payment(msg)
		if err != nil {
			return err
		}
		if err := handle(ctx, msg, p); err != nil {
			return err
		}
	}
	return nil
}

// base is the handlers' empty Setup and Cleanup.
type base struct{}

func (base) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (base) Cleanup(sarama.ConsumerGroupSession) error { return nil }

// CommitFirst marks and commits each record before it credits it (with
// ManualConfig), so that no record is ever handled twice: a crash between
// the commit and the credit loses the payment.
type CommitFirst struct {
	base
	DB *pgxpool.Pool
}

// ConsumeClaim commits, then credits.
func (h CommitFirst) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	return eachPayment(claim, func(ctx context.Context, msg *sarama.ConsumerMessage, p Payment) error {
		sess.MarkMessage(msg, "")
		sess.Commit()
		return credit(ctx, h.DB, p)
	})
}

// NoInbox credits each record, then marks it for sarama's autocommit
// (with Config): a crash before the next tick hands the record out again,
// and it is credited again.
type NoInbox struct {
	base
	DB *pgxpool.Pool
}

// ConsumeClaim credits, then marks.
func (h NoInbox) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	return eachPayment(claim, func(ctx context.Context, msg *sarama.ConsumerMessage, p Payment) error {
		if err := credit(ctx, h.DB, p); err != nil {
			return err
		}
		sess.MarkMessage(msg, "")
		return nil
	})
}

// Inbox records the payment's ID in an inbox in the credit's transaction
// and skips a payment it has seen, then marks the record for sarama's
// autocommit (with Config): a redelivery and a producer's retry carry the
// same ID, and are skipped. It reads the claim as sarama's own example
// does.
type Inbox struct {
	base
	DB *pgxpool.Pool
}

// ConsumeClaim credits once per payment ID, then marks.
func (h Inbox) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	// The credit's transaction does not take the session's context: a
	// rebalance cancels it, and a credit under way finishes (or rolls
	// back) on its own; the inbox makes the record's next owner skip it.
	ctx := context.Background()
	for {
		select {
		case msg, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			p, err := payment(msg)
			if err != nil {
				return err
			}
			err = pgx.BeginFunc(ctx, h.DB, func(tx pgx.Tx) error {
				_, err := ledger.CreditOnce(ctx, tx, p.ID, p.Account, p.Amount)
				return err
			})
			if err != nil {
				return err
			}
			sess.MarkMessage(msg, "")
		case <-sess.Context().Done():
			return nil
		}
	}
}
