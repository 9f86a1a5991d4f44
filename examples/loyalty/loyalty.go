// Package loyalty holds the seed's loyalty-points jobs: "reward order 9812
// with 50 points", written three ways. RewardByIncrement is not idempotent;
// RewardWithLedger and RewardByRecompute are.
package loyalty

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// RewardPoints is what one order earns.
const RewardPoints = 50

// RewardByIncrement adds the points to the balance. Running it twice adds
// them twice: free points.
func RewardByIncrement(ctx context.Context, db *pgxpool.Pool, customerID, orderID int64) error {
	_, err := db.Exec(ctx, `UPDATE customers SET points = points + $2 WHERE id = $1`, customerID, RewardPoints)
	return err
}

// RewardWithLedger records the reward in a ledger whose unique constraint
// refuses a duplicate, and adds to the balance only if the insert happened,
// in one statement.
func RewardWithLedger(ctx context.Context, db *pgxpool.Pool, customerID, orderID int64) error {
	_, err := db.Exec(ctx, `
WITH added AS (
  INSERT INTO points_ledger (customer_id, order_id, reason, points)
  VALUES ($1, $2, 'order_reward', $3)
  ON CONFLICT (order_id, reason) DO NOTHING
  RETURNING customer_id, points
)
UPDATE customers c
SET points = c.points + added.points
FROM added
WHERE c.id = added.customer_id`, customerID, orderID, RewardPoints)
	return err
}

// RewardByRecompute records the reward and then sets the balance to the
// sum of the ledger: "make it so" instead of "add 50". Recomputing twice
// gives the same answer.
func RewardByRecompute(ctx context.Context, db *pgxpool.Pool, customerID, orderID int64) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `
INSERT INTO points_ledger (customer_id, order_id, reason, points)
VALUES ($1, $2, 'order_reward', $3)
ON CONFLICT (order_id, reason) DO NOTHING`, customerID, orderID, RewardPoints); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `
UPDATE customers
SET points = (SELECT coalesce(sum(points), 0) FROM points_ledger WHERE customer_id = $1)
WHERE id = $1`, customerID); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
