package drivers

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PgxDB is what the pgx jobs need: a *pgx.Conn and a *pgxpool.Pool both
// have it.
type PgxDB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// PgxWithLedger rewards the order once, with pgx.
func PgxWithLedger(ctx context.Context, db PgxDB, customerID, orderID int64) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO points_ledger (order_id, customer_id, points) VALUES ($1, $2, $3) ON CONFLICT (order_id) DO NOTHING`,
			orderID, customerID, Points)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE customers SET points = points + $2 WHERE id = $1`, customerID, Points)
		return err
	})
}

// PgxIncrement adds the points on every delivery, with pgx.
func PgxIncrement(ctx context.Context, db PgxDB, customerID, orderID int64) error {
	_, err := db.Exec(ctx, `UPDATE customers SET points = points + $2 WHERE id = $1`, customerID, Points)
	return err
}
