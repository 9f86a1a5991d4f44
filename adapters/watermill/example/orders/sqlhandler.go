package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SQLHandler awards an order's points for an OrderPlaced message that
// watermill-sql's subscriber delivers. It publishes nothing.
type SQLHandler struct {
	DB *pgxpool.Pool
	// InSubscriberTx writes in the subscriber's transaction
	// (wsql.TxFromContext), which commits the consumer group's offset
	// with the points: right. Without it the points are committed on DB
	// first and the offset after, so a crash between the two awards the
	// points again on the next poll.
	InSubscriberTx bool
	// Courier, when set, is booked after the points are written.
	Courier Courier
}

// award is the points, as two statements on any executor.
func award(ctx context.Context, exec func(ctx context.Context, sql string, args ...any) error, orderID int64) error {
	if err := exec(ctx, `INSERT INTO ledger (order_id, points) SELECT id, points FROM orders WHERE id = $1`, orderID); err != nil {
		return err
	}
	return exec(ctx, `UPDATE accounts SET points = points + (SELECT points FROM orders WHERE id = $1) WHERE id = (SELECT account_id FROM orders WHERE id = $1)`, orderID)
}

// Handle awards the order's points.
func (h SQLHandler) Handle(msg *message.Message) ([]*message.Message, error) {
	ctx := msg.Context()
	var ev OrderPlaced
	if err := json.Unmarshal(msg.Payload, &ev); err != nil {
		return nil, fmt.Errorf("decoding OrderPlaced %s: %w", msg.Payload, err)
	}
	if h.InSubscriberTx {
		tx, ok := wsql.TxFromContext(ctx)
		if !ok {
			return nil, errors.New("the message carries no watermill-sql transaction")
		}
		if err := award(ctx, func(ctx context.Context, sql string, args ...any) error {
			_, err := tx.ExecContext(ctx, sql, args...)
			return err
		}, ev.OrderID); err != nil {
			return nil, err
		}
		return nil, h.book(ctx, ev.OrderID)
	}
	tx, err := h.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := award(ctx, func(ctx context.Context, sql string, args ...any) error {
		_, err := tx.Exec(ctx, sql, args...)
		return err
	}, ev.OrderID); err != nil {
		return nil, err
	}
	if err := h.book(ctx, ev.OrderID); err != nil {
		return nil, err
	}
	return nil, tx.Commit(ctx)
}

func (h SQLHandler) book(ctx context.Context, orderID int64) error {
	if h.Courier == nil {
		return nil
	}
	if err := h.Courier.Book(ctx, orderID); err != nil {
		return fmt.Errorf("booking the courier for order %d: %w", orderID, err)
	}
	return nil
}
