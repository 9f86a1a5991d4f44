// Package twofaults holds a job that survives every single fault of the
// default matrix and still pays twice when two faults meet: a producer
// enqueues the job twice, and the second copy's first delivery dies.
//
// Reward checks the business key (has this order been rewarded, by any
// job?) on a job's first delivery only, and on a redelivery trusts the job
// ID alone, reasoning that the first delivery already ran the business
// check. That holds for every single fault: a redelivery of the original
// job finds its job ID, and a producer copy's first delivery finds the
// order rewarded. It breaks when the copy's first delivery crashes: the
// copy's redelivery skips the business check, finds no row for its own
// job ID, and rewards the order again. Exploration finds and shrinks it
// to "j1a1w1 > j2a1w2!crash:1".
package twofaults

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema holds the customers, the rewarded orders (the business key) and
// the processed job IDs.
const Schema = `
CREATE TABLE customers (
  id     bigint PRIMARY KEY,
  points int    NOT NULL DEFAULT 0
);
CREATE TABLE rewards (
  order_id    bigint PRIMARY KEY,
  rewarded_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE processed_jobs (
  job_id       text PRIMARY KEY,
  processed_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO customers (id, points) VALUES (77, 120);
`

// Reward gives the customer 50 points for the order, once per order it
// hopes, in one transaction.
func Reward(ctx context.Context, db *pgxpool.Pool, jobID string, attempt int, customerID, orderID int64) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	tag, err := tx.Exec(ctx, `INSERT INTO rewards (order_id) VALUES ($1) ON CONFLICT DO NOTHING`, orderID)
	if err != nil {
		return err
	}
	if attempt == 1 && tag.RowsAffected() == 0 {
		return tx.Commit(ctx) // rewarded already: a producer's second copy
	}
	// A redelivery: its first delivery passed the check above, so only
	// this job ID can have done the work. (The bug: that first delivery
	// may have died before its check committed.)
	tag, err = tx.Exec(ctx, `INSERT INTO processed_jobs (job_id) VALUES ($1) ON CONFLICT DO NOTHING`, jobID)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return tx.Commit(ctx) // this job did it already
	}
	if _, err := tx.Exec(ctx, `UPDATE customers SET points = points + 50 WHERE id = $1`, customerID); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
