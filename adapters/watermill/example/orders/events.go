package orders

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ProcessorConfig is the service's cqrs event processor config, as its
// main builds it (with its real subscriber constructor, left out here).
func ProcessorConfig() cqrs.EventProcessorConfig {
	return cqrs.EventProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.EventProcessorGenerateSubscribeTopicParams) (string, error) {
			return "events." + p.EventName, nil
		},
		Marshaler: cqrs.JSONMarshaler{GenerateName: cqrs.StructName},
	}
}

// NewPointsAwarder is the cqrs event handler that awards an order's
// points when it is placed, built once at startup on the service's pool.
// With inbox it records the event's message UUID in the points
// transaction and skips one it has seen.
func NewPointsAwarder(db *pgxpool.Pool, courier Courier, inbox bool) cqrs.EventHandler {
	return cqrs.NewEventHandler("AwardPoints", func(ctx context.Context, ev *OrderPlaced) error {
		msg := cqrs.OriginalMessageFromCtx(ctx)
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			if inbox {
				tag, err := tx.Exec(ctx, `INSERT INTO processed_messages VALUES ($1) ON CONFLICT DO NOTHING`, msg.UUID)
				if err != nil {
					return err
				}
				if tag.RowsAffected() == 0 {
					return nil
				}
			}
			if courier != nil {
				if err := courier.Book(ctx, ev.OrderID); err != nil {
					return fmt.Errorf("booking the courier for order %d: %w", ev.OrderID, err)
				}
			}
			if _, err := tx.Exec(ctx, `INSERT INTO ledger (order_id, points) SELECT id, points FROM orders WHERE id = $1`, ev.OrderID); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE accounts SET points = points + (SELECT points FROM orders WHERE id = $1) WHERE id = (SELECT account_id FROM orders WHERE id = $1)`, ev.OrderID)
			return err
		})
	})
}
