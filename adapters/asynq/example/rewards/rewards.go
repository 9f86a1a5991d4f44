// Package rewards is production asynq handler code: handlers that award an
// order's loyalty points. It never imports twice; its tests check it with
// twice's asynq adapter.
package rewards

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema is the tables the handlers use.
const Schema = `
CREATE TABLE accounts (id bigint PRIMARY KEY, points bigint NOT NULL);
CREATE TABLE orders (id bigint PRIMARY KEY, account_id bigint NOT NULL REFERENCES accounts, points bigint NOT NULL);
CREATE TABLE processed_tasks (task_id text PRIMARY KEY);
CREATE TABLE ledger (id bigserial PRIMARY KEY, order_id bigint NOT NULL, points bigint NOT NULL);
INSERT INTO accounts VALUES (1, 120);
INSERT INTO orders VALUES (9812, 1, 50);
`

// TypeReward is the task type of a reward.
const TypeReward = "reward:order"

// RewardPayload is the reward task's payload.
type RewardPayload struct {
	OrderID int64 `json:"order_id"`
}

// NewRewardTask is the task the checkout enqueues for an order.
func NewRewardTask(orderID int64, opts ...asynq.Option) *asynq.Task {
	payload, err := json.Marshal(RewardPayload{OrderID: orderID})
	if err != nil {
		panic(err) // an int64 always marshals
	}
	return asynq.NewTask(TypeReward, payload, opts...)
}

// RewardHandler adds the order's points, once per asynq task ID: it
// records the ID in processed_tasks in the same transaction, so a retry
// or a redelivery of the same task does nothing. It is idempotent by
// task ID, not by order: a second task for the same order (a producer
// that enqueued twice without asynq.TaskID) awards again.
type RewardHandler struct {
	Pool *pgxpool.Pool
}

// ProcessTask awards the points.
func (h *RewardHandler) ProcessTask(ctx context.Context, t *asynq.Task) error {
	var p RewardPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return fmt.Errorf("reward payload %s: %w", t.Payload(), errors.Join(err, asynq.SkipRetry))
	}
	id, ok := asynq.GetTaskID(ctx)
	if !ok {
		return fmt.Errorf("reward for order %d: no asynq task ID in the context", p.OrderID)
	}
	return pgx.BeginFunc(ctx, h.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO processed_tasks (task_id) VALUES ($1) ON CONFLICT DO NOTHING`, id)
		if err != nil {
			return fmt.Errorf("recording task %s: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			return nil // this task already awarded
		}
		_, err = tx.Exec(ctx, `
			UPDATE accounts SET points = accounts.points + o.points
			FROM orders o WHERE o.id = $1 AND accounts.id = o.account_id`, p.OrderID)
		return err
	})
}

// LedgerHandler writes the order's ledger line in autocommit, with no
// guard: every delivery writes one more line.
type LedgerHandler struct {
	Pool *pgxpool.Pool
}

// ProcessTask writes the line.
func (h *LedgerHandler) ProcessTask(ctx context.Context, t *asynq.Task) error {
	var p RewardPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return fmt.Errorf("ledger payload %s: %w", t.Payload(), errors.Join(err, asynq.SkipRetry))
	}
	_, err := h.Pool.Exec(ctx, `INSERT INTO ledger (order_id, points) SELECT id, points FROM orders WHERE id = $1`, p.OrderID)
	return err
}

// NewMux is the worker's ServeMux: the handlers by task type.
func NewMux(pool *pgxpool.Pool) *asynq.ServeMux {
	mux := asynq.NewServeMux()
	mux.Handle(TypeReward, &RewardHandler{Pool: pool})
	return mux
}

// EnqueueReward is the checkout's producer: it enqueues the order's
// reward task. Without keyed, asynq gives each enqueue a new random task
// ID, so a checkout that retries its enqueue (a timeout) makes a second
// task, which RewardHandler awards again. With keyed, the task ID is the
// order's, kept a day after completion: asynq refuses the retry, and the
// checkout takes the refusal as done.
func EnqueueReward(ctx context.Context, c *asynq.Client, orderID int64, keyed bool) error {
	var opts []asynq.Option
	if keyed {
		opts = append(opts, asynq.TaskID(fmt.Sprintf("reward-%d", orderID)), asynq.Retention(24*time.Hour))
	}
	_, err := c.EnqueueContext(ctx, NewRewardTask(orderID), opts...)
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return nil // enqueued before
	}
	return err
}
