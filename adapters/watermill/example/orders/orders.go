// Package orders is production Watermill handler code: handlers that award
// an order's loyalty points when an OrderPlaced message arrives, book its
// courier and publish PointsAwarded. It never imports twice; its tests
// check it with twice's Watermill adapter.
package orders

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema is the tables the handlers use.
const Schema = `
CREATE TABLE accounts (id bigint PRIMARY KEY, points bigint NOT NULL);
CREATE TABLE orders (id bigint PRIMARY KEY, account_id bigint NOT NULL REFERENCES accounts, points bigint NOT NULL);
CREATE TABLE ledger (id bigserial PRIMARY KEY, order_id bigint NOT NULL, points bigint NOT NULL);
CREATE TABLE processed_messages (uuid text PRIMARY KEY);
INSERT INTO accounts VALUES (1, 120);
INSERT INTO orders VALUES (9812, 1, 50);
`

// OrderPlaced is the message's payload.
type OrderPlaced struct {
	OrderID int64 `json:"order_id"`
}

// PointsAwarded is the payload of the message the handlers publish.
type PointsAwarded struct {
	OrderID int64 `json:"order_id"`
	Points  int64 `json:"points"`
}

// Courier books an order's delivery with an outside service.
type Courier interface {
	Book(ctx context.Context, orderID int64) error
}

// Handler awards an order's points.
type Handler struct {
	DB      *pgxpool.Pool
	Courier Courier
	// Inbox records the message's UUID in the points transaction and
	// skips a message it has seen: idempotent across processes. Without
	// it the handler trusts a deduplicating middleware in front of it.
	Inbox bool
}

// Handle books the courier and awards the points in one transaction, then
// returns PointsAwarded for the router to publish. With Inbox a message
// seen before books and awards nothing and publishes PointsAwarded again.
func (h Handler) Handle(msg *message.Message) ([]*message.Message, error) {
	ctx := msg.Context()
	var ev OrderPlaced
	if err := json.Unmarshal(msg.Payload, &ev); err != nil {
		return nil, fmt.Errorf("decoding OrderPlaced %s: %w", msg.Payload, err)
	}
	var points int64
	err := pgx.BeginFunc(ctx, h.DB, func(tx pgx.Tx) error {
		if h.Inbox {
			tag, err := tx.Exec(ctx, `INSERT INTO processed_messages VALUES ($1) ON CONFLICT DO NOTHING`, msg.UUID)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				// Handled before: publish again, since whether that
				// delivery's publish happened is unknown.
				return tx.QueryRow(ctx, `SELECT points FROM orders WHERE id = $1`, ev.OrderID).Scan(&points)
			}
		}
		if h.Courier != nil {
			if err := h.Courier.Book(ctx, ev.OrderID); err != nil {
				return fmt.Errorf("booking the courier: %w", err)
			}
		}
		if err := tx.QueryRow(ctx, `SELECT points FROM orders WHERE id = $1`, ev.OrderID).Scan(&points); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO ledger (order_id, points) VALUES ($1, $2)`, ev.OrderID, points); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE accounts SET points = points + $2 WHERE id = (SELECT account_id FROM orders WHERE id = $1)`, ev.OrderID, points)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("awarding the points of order %d: %w", ev.OrderID, err)
	}
	out, err := json.Marshal(PointsAwarded{OrderID: ev.OrderID, Points: points})
	if err != nil {
		return nil, err
	}
	return []*message.Message{message.NewMessage(watermill.NewUUID(), out)}, nil
}

// PlacedTopic is the topic OrderPlaced is published to.
const PlacedTopic = "orders.placed"

// Placing is the order service's producer: it publishes OrderPlaced when
// an order is placed, stamped with when.
type Placing struct {
	Pub message.Publisher
	Now func() time.Time
	// KeyedUUID gives the message the UUID "order-placed-<id>", so a
	// broker that drops a repeated message ID drops the service's retry;
	// without it every publish gets a new watermill.NewUUID().
	KeyedUUID bool
}

// Placed publishes OrderPlaced for the order. A publish that timed out
// is published again by the caller, built anew.
func (p Placing) Placed(_ context.Context, orderID int64) error {
	payload, err := json.Marshal(struct {
		OrderPlaced
		PlacedAt time.Time `json:"placed_at"`
	}{OrderPlaced{orderID}, p.Now()})
	if err != nil {
		return err
	}
	uuid := watermill.NewUUID()
	if p.KeyedUUID {
		uuid = fmt.Sprintf("order-placed-%d", orderID)
	}
	return p.Pub.Publish(PlacedTopic, message.NewMessage(uuid, payload))
}
