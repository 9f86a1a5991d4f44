// Package payments is production Kafka consumer code: poll loops that
// credit a payment to its account, each as a team might write it with
// franz-go. It never imports twice; its tests check each loop as written
// with twice's Kafka adapter (twicekafka.LoopJob).
package payments

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runtwice/twice/adapters/kafka/example/ledger"
)

// Topic is the topic payments are produced to; Group the consumers'
// group; CreditedTopic the topic the receipt service reads.
const (
	Topic         = "payments"
	Group         = "payments-ledger"
	CreditedTopic = "payment-credited"
)

// Schema is the tables the consumers use: the ledger's, and the inboxes
// keyed by offset and by content.
const Schema = ledger.Schema + `
CREATE TABLE inbox_offsets (topic text, part int, record_offset bigint, PRIMARY KEY (topic, part, record_offset));
CREATE TABLE inbox_digests (digest bytea PRIMARY KEY);
`

// Payment is a record's value.
type Payment struct {
	ID      string `json:"payment_id"`
	Account int64  `json:"account"`
	Amount  int64  `json:"amount"`
	// RequestedAt is when the producer sent it (Publish).
	RequestedAt time.Time `json:"requested_at,omitzero"`
}

// Publish is the payments service's producer: it stamps the payment with
// now, when it was requested, and produces it to Topic keyed by its ID. A
// send that timed out is sent again, stamped anew.
func Publish(ctx context.Context, cl *kgo.Client, now time.Time, p Payment) error {
	p.RequestedAt = now
	v, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return cl.ProduceSync(ctx, &kgo.Record{Topic: Topic, Key: []byte(p.ID), Value: v}).FirstErr()
}

// ManualCommit are the client options of the loops that commit
// themselves.
func ManualCommit() []kgo.Opt {
	return []kgo.Opt{kgo.ConsumerGroup(Group), kgo.ConsumeTopics(Topic), kgo.DisableAutoCommit()}
}

// AutoCommit are the client options of the loop that lets kgo commit on
// its interval.
func AutoCommit() []kgo.Opt {
	return []kgo.Opt{kgo.ConsumerGroup(Group), kgo.ConsumeTopics(Topic)}
}

// Consumer holds the loops' dependencies.
type Consumer struct{ DB *pgxpool.Pool }

// poll is one poll: its records, or done when the loop should stop.
func poll(ctx context.Context, cl *kgo.Client) (recs []*kgo.Record, done bool, err error) {
	fs := cl.PollFetches(ctx)
	if fs.IsClientClosed() || ctx.Err() != nil {
		return nil, true, nil
	}
	var errs []error
	fs.EachError(func(t string, p int32, err error) { errs = append(errs, fmt.Errorf("%s[%d]: %w", t, p, err)) })
	if len(errs) > 0 {
		return nil, false, errors.Join(errs...)
	}
	return fs.Records(), false, nil
}

// credit writes the payment's ledger line and adds it to the balance, in
// tx.
func credit(ctx context.Context, tx pgx.Tx, p Payment) error {
	return ledger.Credit(ctx, tx, p.ID, p.Account, p.Amount)
}

func payment(r *kgo.Record) (Payment, error) {
	var p Payment
	if err := json.Unmarshal(r.Value, &p); err != nil {
		return p, fmt.Errorf("record %s[%d]@%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	return p, nil
}

// consume is the loops' poll loop: it hands each record and its payment
// to handle and, with commitAfter, commits a poll's records once it has
// handled them all. Without it the loop commits nothing: the handler
// commits, or kgo's autocommit does.
func consume(ctx context.Context, cl *kgo.Client, commitAfter bool, handle func(*kgo.Record, Payment) error) error {
	for {
		recs, done, err := poll(ctx, cl)
		if done || err != nil {
			return err
		}
		for _, r := range recs {
			p, err := payment(r)
			if err != nil {
				return err
			}
			if err := handle(r, p); err != nil {
				return err
			}
		}
		if !commitAfter {
			continue
		}
		if err := cl.CommitRecords(ctx, recs...); err != nil {
			return err
		}
	}
}

// CommitFirst commits each record's offset before it credits it (with
// ManualCommit): a crash between the two loses the payment.
func (c Consumer) CommitFirst(ctx context.Context, cl *kgo.Client) error {
	return consume(ctx, cl, false, func(r *kgo.Record, p Payment) error {
		if err := cl.CommitRecords(ctx, r); err != nil {
			return err
		}
		return pgx.BeginFunc(ctx, c.DB, func(tx pgx.Tx) error { return credit(ctx, tx, p) })
	})
}

// AutoCommitted credits each record and leaves the commit to kgo's
// autocommit (with AutoCommit): a crash before the next tick hands the
// record out again, and it is credited again.
func (c Consumer) AutoCommitted(ctx context.Context, cl *kgo.Client) error {
	return consume(ctx, cl, false, func(_ *kgo.Record, p Payment) error {
		return pgx.BeginFunc(ctx, c.DB, func(tx pgx.Tx) error { return credit(ctx, tx, p) })
	})
}

// InboxByOffset records each record's offset in an inbox in the credit's
// transaction and skips one it has seen, then commits (with
// ManualCommit): a redelivery is skipped, but a producer's retry is a
// record at another offset, and is credited again.
func (c Consumer) InboxByOffset(ctx context.Context, cl *kgo.Client) error {
	return c.inboxed(ctx, cl, func(ctx context.Context, tx pgx.Tx, r *kgo.Record, _ Payment) (pgconn.CommandTag, error) {
		return tx.Exec(ctx, `INSERT INTO inbox_offsets VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, r.Topic, r.Partition, r.Offset)
	})
}

// InboxByPayment is InboxByOffset keyed by the payment's own ID: a
// producer's retry carries the same ID, and is skipped too.
func (c Consumer) InboxByPayment(ctx context.Context, cl *kgo.Client) error {
	return c.inboxed(ctx, cl, func(ctx context.Context, tx pgx.Tx, _ *kgo.Record, p Payment) (pgconn.CommandTag, error) {
		return tx.Exec(ctx, `INSERT INTO inbox_payments VALUES ($1) ON CONFLICT DO NOTHING`, p.ID)
	})
}

// InboxByContent is InboxByOffset keyed by a digest of the record's
// value: a producer's retry of the same bytes is skipped, but Publish
// stamps each send anew, so its retry is another value, and is credited
// again.
func (c Consumer) InboxByContent(ctx context.Context, cl *kgo.Client) error {
	return c.inboxed(ctx, cl, func(ctx context.Context, tx pgx.Tx, r *kgo.Record, _ Payment) (pgconn.CommandTag, error) {
		sum := sha256.Sum256(r.Value)
		return tx.Exec(ctx, `INSERT INTO inbox_digests VALUES ($1) ON CONFLICT DO NOTHING`, sum[:])
	})
}

func (c Consumer) inboxed(ctx context.Context, cl *kgo.Client, mark func(context.Context, pgx.Tx, *kgo.Record, Payment) (pgconn.CommandTag, error)) error {
	return consume(ctx, cl, true, func(r *kgo.Record, p Payment) error {
		return pgx.BeginFunc(ctx, c.DB, func(tx pgx.Tx) error {
			tag, err := mark(ctx, tx, r, p)
			if err != nil || tag.RowsAffected() == 0 {
				return err
			}
			return credit(ctx, tx, p)
		})
	})
}

// NotifyBeforeCommit is InboxByPayment that also tells the receipt
// service: inside the credit's transaction, before COMMIT, it produces
// the payment to CreditedTopic on the same client (with ManualCommit). A
// crash between the produce and COMMIT rolls the credit and its inbox
// row back, but not the record the broker took: the payment comes back,
// is credited once, and the receipt service hears of it twice. (An
// outbox row written in the transaction, produced after COMMIT, would
// not.)
func (c Consumer) NotifyBeforeCommit(ctx context.Context, cl *kgo.Client) error {
	return consume(ctx, cl, true, func(r *kgo.Record, p Payment) error {
		return pgx.BeginFunc(ctx, c.DB, func(tx pgx.Tx) error {
			credited, err := ledger.CreditOnce(ctx, tx, p.ID, p.Account, p.Amount)
			if err != nil || !credited {
				return err
			}
			return cl.ProduceSync(ctx, &kgo.Record{Topic: CreditedTopic, Key: []byte(p.ID), Value: r.Value}).FirstErr()
		})
	})
}
