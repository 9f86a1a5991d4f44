package drivers

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runtwice/twice/examples/drivers/sqlcpgx"
	"github.com/runtwice/twice/examples/drivers/sqlcstd"
)

// SqlcPgxWithLedger rewards the order once, with sqlc's code for pgx/v5.
func SqlcPgxWithLedger(ctx context.Context, db *pgxpool.Pool, customerID, orderID int64) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		q := sqlcpgx.New(tx)
		n, err := q.AddLedgerEntry(ctx, sqlcpgx.AddLedgerEntryParams{OrderID: orderID, CustomerID: customerID, Points: Points})
		if err != nil || n == 0 {
			return err
		}
		return q.AddPoints(ctx, sqlcpgx.AddPointsParams{ID: customerID, Points: Points})
	})
}

// SqlcPgxIncrement adds the points on every delivery, with sqlc's code for
// pgx/v5.
func SqlcPgxIncrement(ctx context.Context, db *pgxpool.Pool, customerID, orderID int64) error {
	return sqlcpgx.New(db).AddPoints(ctx, sqlcpgx.AddPointsParams{ID: customerID, Points: Points})
}

// SqlcStdWithLedger rewards the order once, with sqlc's code for
// database/sql.
func SqlcStdWithLedger(ctx context.Context, db *sql.DB, customerID, orderID int64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	q := sqlcstd.New(db).WithTx(tx)
	n, err := q.AddLedgerEntry(ctx, sqlcstd.AddLedgerEntryParams{OrderID: orderID, CustomerID: customerID, Points: Points})
	if err != nil || n == 0 {
		return err // nil: rewarded before
	}
	if err := q.AddPoints(ctx, sqlcstd.AddPointsParams{ID: customerID, Points: Points}); err != nil {
		return err
	}
	return tx.Commit()
}

// SqlcStdIncrement adds the points on every delivery, with sqlc's code for
// database/sql.
func SqlcStdIncrement(ctx context.Context, db *sql.DB, customerID, orderID int64) error {
	return sqlcstd.New(db).AddPoints(ctx, sqlcstd.AddPointsParams{ID: customerID, Points: Points})
}
