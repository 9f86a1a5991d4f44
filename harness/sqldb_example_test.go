package harness_test

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

// rewardOrder is application code written for database/sql (as sqlc's
// generated code, GORM, bun and ent are): it takes a *sql.DB and knows
// nothing of twice.
func rewardOrder(ctx context.Context, db *sql.DB, customerID, orderID int64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `INSERT INTO points_ledger (order_id, points) VALUES ($1, 50) ON CONFLICT DO NOTHING`, orderID)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err // rewarded before
	}
	if _, err := tx.ExecContext(ctx, `UPDATE customers SET points = points + 50 WHERE id = $1`, customerID); err != nil {
		return err
	}
	return tx.Commit()
}

// Delivery.SQL hands database/sql code the delivery's own connections:
// the harness opens the *sql.DB on first use and closes it when the
// delivery ends, and every statement on it is a step faults can hit.
func ExampleDelivery_SQL() {
	job := harness.Job{
		Name: "reward-order-database-sql",
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			db, err := d.SQL()
			if err != nil {
				return err
			}
			return rewardOrder(ctx, db, 77, 9812)
		},
	}
	res, err := harness.Run(context.Background(), job, harness.Config{
		Setup: []harness.Setup{harness.SQL(`
			CREATE TABLE customers (id bigint PRIMARY KEY, points int NOT NULL);
			CREATE TABLE points_ledger (order_id bigint PRIMARY KEY, points int NOT NULL);
			INSERT INTO customers VALUES (77, 120);`)},
		Faults: []faults.Fault{faults.RunTwice(), faults.CrashAtEveryStep()},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.DropDatabases(context.Background())
	for _, step := range res.Steps {
		fmt.Println("step:", step.SQL)
	}
	for _, s := range res.Scenarios {
		fmt.Printf("%s (%s): %s\n", s.Fault, s.Schedule, s.Verdict)
	}
	// The crashes before steps 1 to 4 all roll the one transaction back,
	// so one of them runs for all (faults.CrashClass).
	//
	// Output:
	// step: begin
	// step: INSERT INTO points_ledger (order_id, points) VALUES ($1, 50) ON CONFLICT DO NOTHING
	// step: UPDATE customers SET points = points + 50 WHERE id = $1
	// step: commit
	// run-twice (j1a1w1 > j1a2w2): idempotent
	// crash-mid-job (j1a1w1!crash:4 > +30s j1a2w2): idempotent
}
