// Package processedjobs holds the seed's "general version": remember what
// was done in a table with a unique key, in the same transaction as the
// job's writes. Keyed by the queue's job ID (ByJobID), it survives a
// redelivery but not a producer that enqueued the job twice; keyed by the
// business key (ByBusinessKey), it survives both.
package processedjobs

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema holds the customers, the processed-jobs table keyed by job ID and
// the one keyed by what the job does.
const Schema = `
CREATE TABLE customers (
  id     bigint PRIMARY KEY,
  points int    NOT NULL DEFAULT 0
);
CREATE TABLE processed_jobs (
  job_id       text PRIMARY KEY,
  processed_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE processed_rewards (
  order_id     bigint NOT NULL,
  reason       text   NOT NULL,
  processed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (order_id, reason)
);
INSERT INTO customers (id, points) VALUES (77, 120);
`

// ByJobID rewards the order unless this job ID was processed already.
func ByJobID(ctx context.Context, db *pgxpool.Pool, jobID string, customerID, orderID int64) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	tag, err := tx.Exec(ctx, `INSERT INTO processed_jobs (job_id) VALUES ($1) ON CONFLICT DO NOTHING`, jobID)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return nil // done before
	}
	if _, err := tx.Exec(ctx, `UPDATE customers SET points = points + 50 WHERE id = $1`, customerID); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// ByBusinessKey rewards the order unless this order's reward was processed
// already, whichever job carried it. It is written with database/sql, as
// many handlers are.
func ByBusinessKey(ctx context.Context, db *sql.DB, customerID, orderID int64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `INSERT INTO processed_rewards (order_id, reason) VALUES ($1, 'order_reward') ON CONFLICT DO NOTHING`, orderID)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err // nil when done before
	}
	if _, err := tx.ExecContext(ctx, `UPDATE customers SET points = points + 50 WHERE id = $1`, customerID); err != nil {
		return err
	}
	return tx.Commit()
}
