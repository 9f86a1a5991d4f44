// Package loyalty is production gue job code: WorkFuncs that award an
// order's loyalty points and remind a customer. It never imports twice;
// its tests check it with twice's gue adapter.
package loyalty

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/vgarvardt/gue/v5"
	"github.com/vgarvardt/gue/v5/adapter/pgxv5"
)

// Schema is the tables the WorkFuncs use.
const Schema = `
CREATE TABLE accounts (id bigint PRIMARY KEY, points bigint NOT NULL);
CREATE TABLE orders (id bigint PRIMARY KEY, account_id bigint NOT NULL REFERENCES accounts, points bigint NOT NULL);
CREATE TABLE ledger (id bigserial PRIMARY KEY, order_id bigint NOT NULL, points bigint NOT NULL);
CREATE TABLE awarded (order_id bigint PRIMARY KEY);
CREATE TABLE reward_requests (order_id bigint PRIMARY KEY, requested_at timestamptz NOT NULL);
INSERT INTO accounts VALUES (1, 120);
INSERT INTO orders VALUES (9812, 1, 50);
`

// Job types, the WorkMap's keys.
const (
	RewardType   = "reward_order"
	LedgerType   = "ledger_order"
	ReminderType = "order_reminder"
)

// RewardArgs asks for an order's points to be added to its account.
type RewardArgs struct {
	OrderID int64 `json:"order_id"`
}

// Reward adds the order's points once per order, in one statement in
// the job's own transaction, j.Tx(): gue commits it with the job's
// deletion, so a crash or a lost reply never awards twice, and the
// awarded row keeps a second job for the same order (gue has no unique
// jobs; a producer that retried its enqueue made one) from awarding
// again.
func Reward(ctx context.Context, j *gue.Job) error {
	var args RewardArgs
	if err := json.Unmarshal(j.Args, &args); err != nil {
		return fmt.Errorf("decoding %s args: %w", j.Type, err)
	}
	_, err := j.Tx().Exec(ctx, `
		WITH claimed AS (INSERT INTO awarded (order_id) VALUES ($1) ON CONFLICT DO NOTHING RETURNING order_id)
		UPDATE accounts SET points = accounts.points + o.points
		FROM orders o JOIN claimed c ON c.order_id = o.id WHERE accounts.id = o.account_id`, args.OrderID)
	return err
}

// RewardPerJob adds the order's points in j.Tx() without remembering the
// order: safe against every redelivery of the job, since gue deletes it in
// the same transaction, but a second job for the same order awards again.
func RewardPerJob(ctx context.Context, j *gue.Job) error {
	var args RewardArgs
	if err := json.Unmarshal(j.Args, &args); err != nil {
		return fmt.Errorf("decoding %s args: %w", j.Type, err)
	}
	_, err := j.Tx().Exec(ctx, `
		UPDATE accounts SET points = accounts.points + o.points
		FROM orders o WHERE o.id = $1 AND accounts.id = o.account_id`, args.OrderID)
	return err
}

// Ledger writes the order's ledger line on a connection of its own, not
// in j.Tx(): the line commits before gue's transaction deletes the job,
// so a worker that dies in between writes it again when gue hands the
// job out again.
type Ledger struct {
	Pool *pgxpool.Pool
}

// Work writes the line.
func (l Ledger) Work(ctx context.Context, j *gue.Job) error {
	var args RewardArgs
	if err := json.Unmarshal(j.Args, &args); err != nil {
		return fmt.Errorf("decoding %s args: %w", j.Type, err)
	}
	_, err := l.Pool.Exec(ctx, `INSERT INTO ledger (order_id, points) SELECT id, points FROM orders WHERE id = $1`, args.OrderID)
	return err
}

// ReminderArgs asks for a reminder to be recorded once DueAt has come.
type ReminderArgs struct {
	OrderID int64     `json:"order_id"`
	DueAt   time.Time `json:"due_at"`
}

// Reminder reschedules itself until the reminder is due, then records it
// in j.Tx().
type Reminder struct {
	Now func() time.Time
}

// Work records the reminder, or asks gue to run the job again when it is
// due.
func (r Reminder) Work(ctx context.Context, j *gue.Job) error {
	var args ReminderArgs
	if err := json.Unmarshal(j.Args, &args); err != nil {
		return fmt.Errorf("decoding %s args: %w", j.Type, err)
	}
	if wait := args.DueAt.Sub(r.Now()); wait > 0 {
		return gue.ErrRescheduleJobIn(wait, "the reminder is not due yet")
	}
	_, err := j.Tx().Exec(ctx, `INSERT INTO ledger (order_id, points) VALUES ($1, 0)`, args.OrderID)
	return err
}

// WorkMap is the map a gue worker of this service is built with.
func WorkMap(pool *pgxpool.Pool, now func() time.Time) gue.WorkMap {
	return gue.WorkMap{
		RewardType:   Reward,
		LedgerType:   Ledger{Pool: pool}.Work,
		ReminderType: Reminder{Now: now}.Work,
	}
}

// RequestReward is the order service's producer: in the caller's
// transaction it records the order's reward request and enqueues the
// reward job with it, so both commit or neither. A request retried by
// its caller (a timeout, a redelivered webhook) enqueues again, unless
// Once: then the request row, keyed by the order, is found and nothing is
// enqueued.
func RequestReward(ctx context.Context, tx pgx.Tx, gc *gue.Client, now time.Time, orderID int64, once bool) error {
	tag, err := tx.Exec(ctx, `INSERT INTO reward_requests (order_id, requested_at) VALUES ($1, $2)
		ON CONFLICT (order_id) DO UPDATE SET requested_at = excluded.requested_at WHERE NOT $3`, orderID, now, once)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return nil // requested before
	}
	args, err := json.Marshal(RewardArgs{OrderID: orderID})
	if err != nil {
		return err
	}
	return gc.EnqueueTx(ctx, &gue.Job{Type: RewardType, Args: args}, pgxv5.NewTx(tx))
}
