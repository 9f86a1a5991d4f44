// Package orders is a Kafka consumer as a team writes it with franz-go:
// each record on the "orders" topic is an order paid, and its handler
// writes a ledger line in PostgreSQL. It never imports twice; its tests
// check each handler with twicekafka.
//
// Four handlers, each the shape of a consumer found in production:
//
//   - CommitFirst commits the record's offset, then writes: a crash
//     between the two loses the ledger line (at-most-once).
//   - WriteThenCommit writes, and the poll loop commits after it: a crash
//     before the commit writes the line twice (at-least-once).
//   - InboxByOffset writes the line and a processed-offsets row keyed by
//     (topic, partition, offset) in one transaction: every redelivery of
//     the record is harmless, but a producer's resend of the same order is
//     a new offset, and is written again.
//   - InboxByKey keys its inbox by the record's key (the order): correct
//     under every fault, resends included.
//   - Receipt is InboxByKey that then sends a receipt record: a crash
//     between its commit and the send loses the receipt.
//   - Transactional runs in Kafka's exactly-once loop
//     (kgo.GroupTransactSession): its receipt and the offset commit are
//     one Kafka transaction, and its PostgreSQL write is outside it, so a
//     redelivery after an aborted transaction writes the line again.
package orders

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Topic is the topic the producer writes orders to.
const Topic = "orders"

// Schema is the consumer's tables.
const Schema = `
CREATE TABLE ledger (id bigserial PRIMARY KEY, order_id bigint NOT NULL, amount_cents bigint NOT NULL);
CREATE TABLE processed_offsets (topic text NOT NULL, partition int NOT NULL, "offset" bigint NOT NULL, PRIMARY KEY (topic, partition, "offset"));
CREATE TABLE processed_keys (key text PRIMARY KEY);
`

// Paid is a record's value.
type Paid struct {
	OrderID     int64 `json:"order_id"`
	AmountCents int64 `json:"amount_cents"`
}

func decode(r *kgo.Record) (Paid, error) {
	var p Paid
	if err := json.Unmarshal(r.Value, &p); err != nil {
		return p, fmt.Errorf("orders: record %s[%d]@%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	return p, nil
}

const insertLine = `INSERT INTO ledger (order_id, amount_cents) VALUES ($1, $2)`

// CommitFirst commits the record before it writes, so that a slow write
// never holds the partition back.
type CommitFirst struct {
	DB     *pgxpool.Pool
	Client *kgo.Client
}

// Handle commits r's offset, then writes the ledger line.
func (c CommitFirst) Handle(ctx context.Context, r *kgo.Record) error {
	p, err := decode(r)
	if err != nil {
		return err
	}
	if err := c.Client.CommitRecords(ctx, r); err != nil {
		return fmt.Errorf("orders: committing %s[%d]@%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	_, err = c.DB.Exec(ctx, insertLine, p.OrderID, p.AmountCents)
	return err
}

// WriteThenCommit writes the ledger line; the poll loop commits after it
// (Run).
type WriteThenCommit struct{ DB *pgxpool.Pool }

// Handle writes the ledger line.
func (c WriteThenCommit) Handle(ctx context.Context, r *kgo.Record) error {
	p, err := decode(r)
	if err != nil {
		return err
	}
	_, err = c.DB.Exec(ctx, insertLine, p.OrderID, p.AmountCents)
	return err
}

// InboxByOffset records the record's (topic, partition, offset) with the
// line in one transaction, and skips a record it has recorded.
type InboxByOffset struct{ DB *pgxpool.Pool }

// Handle writes the line once per offset.
func (c InboxByOffset) Handle(ctx context.Context, r *kgo.Record) error {
	_, _, err := inbox(ctx, c.DB, r, `INSERT INTO processed_offsets (topic, partition, "offset") VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
		r.Topic, r.Partition, r.Offset)
	return err
}

// InboxByKey records the record's key (the order) with the line in one
// transaction, and skips a key it has recorded.
type InboxByKey struct{ DB *pgxpool.Pool }

// Handle writes the line once per order.
func (c InboxByKey) Handle(ctx context.Context, r *kgo.Record) error {
	_, _, err := inbox(ctx, c.DB, r, markKey, string(r.Key))
	return err
}

// markKey records a record's key (the order) in the key inbox.
const markKey = `INSERT INTO processed_keys (key) VALUES ($1) ON CONFLICT DO NOTHING`

// inbox decodes r and, in one transaction, marks it in an inbox (the
// statement mark with args, which inserts nothing for a mark it holds)
// and writes its ledger line, unless the mark was there: then it writes
// nothing. fresh says it wrote the line.
func inbox(ctx context.Context, db *pgxpool.Pool, r *kgo.Record, mark string, args ...any) (p Paid, fresh bool, err error) {
	p, err = decode(r)
	if err != nil {
		return p, false, err
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, mark, args...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return nil // handled before
		}
		fresh = true
		_, err = tx.Exec(ctx, insertLine, p.OrderID, p.AmountCents)
		return err
	})
	return p, fresh, err
}

// ended says whether a poll loop ends after the poll fs, and with what:
// the client was closed or ctx ended (ctx's error), or the poll failed.
func ended(ctx context.Context, fs kgo.Fetches) (bool, error) {
	if fs.IsClientClosed() || ctx.Err() != nil {
		return true, ctx.Err()
	}
	if err := fs.Err(); err != nil {
		return true, err
	}
	return false, nil
}

// Run is the consumer's poll loop, with autocommit disabled
// (kgo.DisableAutoCommit): each record is handled, then committed; a
// handler's error ends the loop, and the process's restart polls the
// record again from the committed offset. A commit is skipped for a
// handler that commits itself (commit false).
func Run(ctx context.Context, cl *kgo.Client, handle func(context.Context, *kgo.Record) error, commit bool) error {
	for {
		fs := cl.PollFetches(ctx)
		if done, err := ended(ctx, fs); done {
			return err
		}
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			if err := handle(ctx, r); err != nil {
				return err
			}
			if !commit {
				continue
			}
			if err := cl.CommitRecords(ctx, r); err != nil {
				return err
			}
		}
	}
}

// Producer is what Receipt produces with: a *kgo.Client.
type Producer interface {
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
}

// ReceiptsTopic is where Receipt sends a receipt per order.
const ReceiptsTopic = "receipts"

// receipt is the receipt record of the order paid in r.
func receipt(r *kgo.Record, p Paid) *kgo.Record {
	return &kgo.Record{Topic: ReceiptsTopic, Key: r.Key, Value: fmt.Appendf(nil, `{"order_id":%d,"amount_cents":%d}`, p.OrderID, p.AmountCents)}
}

// Receipt writes the line with the key inbox, as InboxByKey, and then
// sends a receipt record to ReceiptsTopic when the order was new. A crash
// between its commit and the send loses the receipt: the redelivery finds
// the order handled and sends nothing.
type Receipt struct {
	DB  *pgxpool.Pool
	Out Producer
}

// Handle writes the line once per order, then sends its receipt.
func (c Receipt) Handle(ctx context.Context, r *kgo.Record) error {
	p, fresh, err := inbox(ctx, c.DB, r, markKey, string(r.Key))
	if err != nil || !fresh {
		return err
	}
	return c.Out.ProduceSync(ctx, receipt(r, p)).FirstErr()
}

// Transactional writes the line and sends its receipt on the session's
// client, inside the Kafka transaction the loop (RunTransactional) began
// after its poll and commits with the record's offset.
type Transactional struct {
	DB  *pgxpool.Pool
	Out Producer
}

// Handle writes the line and sends the receipt in the transaction.
func (c Transactional) Handle(ctx context.Context, r *kgo.Record) error {
	p, err := decode(r)
	if err != nil {
		return err
	}
	if _, err := c.DB.Exec(ctx, insertLine, p.OrderID, p.AmountCents); err != nil {
		return err
	}
	return c.Out.ProduceSync(ctx, receipt(r, p)).FirstErr()
}

// RunTransactional is the exactly-once loop: poll, begin, handle each
// record, and end the transaction, committing the records produced with
// the polled offsets, or aborting after a handler's error.
func RunTransactional(ctx context.Context, sess *kgo.GroupTransactSession, handle func(context.Context, *kgo.Record) error) error {
	for {
		fs := sess.PollFetches(ctx)
		if done, err := ended(ctx, fs); done {
			return err
		}
		if err := sess.Begin(); err != nil {
			return err
		}
		var herr error
		fs.EachRecord(func(r *kgo.Record) {
			if herr == nil {
				herr = handle(ctx, r)
			}
		})
		end := kgo.TryCommit
		if herr != nil {
			end = kgo.TryAbort
		}
		if _, err := sess.End(ctx, end); err != nil {
			return err
		}
		if herr != nil {
			return herr
		}
	}
}
