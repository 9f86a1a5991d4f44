package orders

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // the repository's driver, as the service registers it
)

// PointsRepo is the points repository of a service written on sqlx and
// lib/pq: it opens its own pool from a DSN at startup.
type PointsRepo struct{ db *sqlx.DB }

// OpenPointsRepo opens the repository's pool; it connects on first use.
func OpenPointsRepo(dsn string) (*PointsRepo, error) {
	db, err := sqlx.Open("postgres", dsn)
	if err != nil {
		return nil, fmt.Errorf("orders: opening the points repository: %w", err)
	}
	return &PointsRepo{db: db}, nil
}

// Close closes the repository's pool.
func (r *PointsRepo) Close() error { return r.db.Close() }

// Award adds the order's points to its account in one transaction. With
// inbox it first records the message's UUID and skips a message it has
// seen.
func (r *PointsRepo) Award(ctx context.Context, orderID int64, messageUUID string, inbox bool) (err error) {
	tx, err := r.db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ignoreDone(tx.Rollback()))
		}
	}()
	if inbox {
		res, err := tx.ExecContext(ctx, `INSERT INTO processed_messages VALUES ($1) ON CONFLICT DO NOTHING`, messageUUID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(err, tx.Commit())
		}
	}
	var order struct {
		AccountID int64 `db:"account_id"`
		Points    int64 `db:"points"`
	}
	if err := tx.GetContext(ctx, &order, `SELECT account_id, points FROM orders WHERE id = $1`, orderID); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE accounts SET points = points + $1 WHERE id = $2`, order.Points, order.AccountID); err != nil {
		return err
	}
	return tx.Commit()
}

func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

// NewRepoAwarder is the cqrs event handler that awards an order's points
// through the repository, built once at startup.
func NewRepoAwarder(repo *PointsRepo, inbox bool) cqrs.EventHandler {
	return cqrs.NewEventHandler("AwardPoints", func(ctx context.Context, ev *OrderPlaced) error {
		return repo.Award(ctx, ev.OrderID, cqrs.OriginalMessageFromCtx(ctx).UUID, inbox)
	})
}
