// Package orderstatus holds the seed's two ways to move an order along:
// "make order 9812's status shipped" (MarkShipped) is safe to repeat;
// "advance order 9812 to the next status" (Advance) is not.
package orderstatus

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema is the orders table with one order waiting to ship.
const Schema = `
CREATE TABLE orders (
  id     bigint PRIMARY KEY,
  status text   NOT NULL CHECK (status IN ('placed', 'packed', 'shipped', 'delivered'))
);
INSERT INTO orders (id, status) VALUES (9812, 'packed'), (9813, 'placed');
`

// MarkShipped makes the order's status shipped, whatever it was.
func MarkShipped(ctx context.Context, db *pgxpool.Pool, orderID int64) error {
	tag, err := db.Exec(ctx, `UPDATE orders SET status = 'shipped' WHERE id = $1`, orderID)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("order %d not found", orderID)
	}
	return nil
}

// Advance moves the order to the status after its current one. A second
// delivery moves it one step too far.
func Advance(ctx context.Context, db *pgxpool.Pool, orderID int64) error {
	_, err := db.Exec(ctx, `
UPDATE orders SET status = CASE status
  WHEN 'placed'  THEN 'packed'
  WHEN 'packed'  THEN 'shipped'
  WHEN 'shipped' THEN 'delivered'
  ELSE status END
WHERE id = $1`, orderID)
	return err
}
