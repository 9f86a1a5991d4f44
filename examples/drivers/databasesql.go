package drivers

import (
	"context"
	"database/sql"
)

// SQLWithLedger rewards the order once, with database/sql: the driver
// behind db may be pgx's stdlib or lib/pq.
func SQLWithLedger(ctx context.Context, db *sql.DB, customerID, orderID int64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	res, err := tx.ExecContext(ctx, `INSERT INTO points_ledger (order_id, customer_id, points) VALUES ($1, $2, $3) ON CONFLICT (order_id) DO NOTHING`,
		orderID, customerID, Points)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err // nil: rewarded before
	}
	if _, err := tx.ExecContext(ctx, `UPDATE customers SET points = points + $2 WHERE id = $1`, customerID, Points); err != nil {
		return err
	}
	return tx.Commit()
}

// SQLIncrement adds the points on every delivery, with database/sql.
func SQLIncrement(ctx context.Context, db *sql.DB, customerID, orderID int64) error {
	_, err := db.ExecContext(ctx, `UPDATE customers SET points = points + $2 WHERE id = $1`, customerID, Points)
	return err
}
