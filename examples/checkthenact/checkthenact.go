// Package checkthenact holds the seed's warning: "check, then act" lets two
// workers both see nothing and both act. CheckThenAct is that mistake;
// GuardedForUpdate takes a row lock before it checks, so the second worker
// waits and then sees the first one's work; TwoAutocommits records the
// reward and updates the balance in two statements that commit on their
// own, so a crash between them loses the points for good.
package checkthenact

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema is a customer and a ledger with no unique constraint: nothing but
// the handler's own check stands between a retry and a double reward.
const Schema = `
CREATE TABLE customers (id bigint PRIMARY KEY, points int NOT NULL);
CREATE TABLE points_ledger (
  id          bigserial PRIMARY KEY,
  customer_id bigint NOT NULL REFERENCES customers (id),
  order_id    bigint NOT NULL,
  points      int    NOT NULL
);
INSERT INTO customers VALUES (77, 120);
`

// CheckThenAct is the seed's JavaScript, in Go: look for the ledger row,
// and if there is none, add the points and write the row, each statement
// on its own.
func CheckThenAct(ctx context.Context, db *pgxpool.Pool, customerID, orderID int64) error {
	return checkThenAct(ctx, db, customerID, orderID)
}

// querier is what the check and the act run on: the pool, where each
// statement commits on its own, or one transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// checkThenAct looks for the order's ledger row on q, and if there is
// none, adds the points and writes the row.
func checkThenAct(ctx context.Context, q querier, customerID, orderID int64) error {
	var already bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM points_ledger WHERE order_id = $1)`, orderID).Scan(&already); err != nil {
		return err
	}
	if already {
		return nil
	}
	if _, err := q.Exec(ctx, `UPDATE customers SET points = points + 50 WHERE id = $1`, customerID); err != nil {
		return err
	}
	_, err := q.Exec(ctx, `INSERT INTO points_ledger (customer_id, order_id, points) VALUES ($1, $2, 50)`, customerID, orderID)
	return err
}

// GuardedForUpdate does the same check inside a transaction that first
// locks the customer's row: a second worker waits at the lock, then its
// check sees the first worker's ledger row.
func GuardedForUpdate(ctx context.Context, db *pgxpool.Pool, customerID, orderID int64) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM customers WHERE id = $1 FOR UPDATE`, customerID); err != nil {
			return err
		}
		return checkThenAct(ctx, tx, customerID, orderID)
	})
}

// SchemaUnique is Schema with the ledger's duplicate refused by the
// database, as TwoAutocommits relies on.
const SchemaUnique = Schema + `
CREATE UNIQUE INDEX points_ledger_order ON points_ledger (order_id);
`

// TwoAutocommits writes the ledger row (a duplicate does nothing) and,
// only if it was new, adds the points, each statement committing on its
// own. Retries and concurrent workers are harmless; a crash between the
// two statements is not: the redelivery finds the row and never adds the
// points.
func TwoAutocommits(ctx context.Context, db *pgxpool.Pool, customerID, orderID int64) error {
	tag, err := db.Exec(ctx, `INSERT INTO points_ledger (customer_id, order_id, points) VALUES ($1, $2, 50) ON CONFLICT DO NOTHING`, customerID, orderID)
	if err != nil || tag.RowsAffected() == 0 {
		return err
	}
	_, err = db.Exec(ctx, `UPDATE customers SET points = points + 50 WHERE id = $1`, customerID)
	return err
}
