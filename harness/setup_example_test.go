package harness_test

import (
	"context"
	"fmt"
	"time"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

// A setup written against database/sql, as golang-migrate, goose or sqlx
// code is: FuncDB hands it a *sql.DB on the template database (or a pgx
// pool, or the connection string) and closes it after the step. The step
// must finish within SetupTimeout.
func ExampleFuncDB() {
	migrate := func(ctx context.Context, db *harness.SetupDB) error {
		sqlDB, err := db.SQL()
		if err != nil {
			return err
		}
		_, err = sqlDB.ExecContext(ctx, `
			CREATE TABLE users (id int PRIMARY KEY, verified bool NOT NULL DEFAULT false);
			INSERT INTO users (id) VALUES (1);`)
		return err
	}
	job := harness.Job{
		Name: "verify-email",
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			_, err := d.DB.Exec(ctx, `UPDATE users SET verified = true WHERE id = 1`)
			return err
		},
	}
	res, err := harness.Run(context.Background(), job, harness.Config{
		Setup:        []harness.Setup{harness.FuncDB(migrate)},
		SetupTimeout: time.Minute,
		Faults:       []faults.Fault{faults.RunTwice(), faults.CrashBeforeAck()},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.DropDatabases(context.Background())
	for _, s := range res.Scenarios {
		fmt.Printf("%s: %s\n", s.Fault, s.Verdict)
	}
	// Output:
	// run-twice: idempotent
	// crash-before-ack: idempotent
}
