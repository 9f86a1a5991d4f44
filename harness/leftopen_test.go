package harness_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/recordtb"
)

// A handler that leaves a transaction open fails a plain check whichever
// client it leaves it on, with the reason and the line that accepts it,
// and passes once accepted. database/sql rolls back a transaction begun
// on the delivery's context once the harness cancels that context, and
// pgxpool closes a connection given back inside a transaction, each on
// a goroutine of its own: the warning rests on the transaction status
// the client had when the handler returned, so neither races it.
func TestTransactionLeftOpenOnEveryClient(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler func(ctx context.Context, d *harness.Delivery) error
	}{
		{"pgxpool transaction", func(ctx context.Context, d *harness.Delivery) error {
			tx, err := d.DB.Begin(ctx)
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `UPDATE users SET is_email_verified = true WHERE id = 1`)
			return err // no Commit, no Rollback
		}},
		{"pgxpool connection given back inside BEGIN", func(ctx context.Context, d *harness.Delivery) error {
			c, err := d.DB.Acquire(ctx)
			if err != nil {
				return err
			}
			defer c.Release() // pgxpool closes it, in the background
			if _, err := c.Exec(ctx, `BEGIN`); err != nil {
				return err
			}
			_, err = c.Exec(ctx, `UPDATE users SET is_email_verified = true WHERE id = 1`)
			return err
		}},
		{"database/sql transaction on the delivery's context", func(ctx context.Context, d *harness.Delivery) error {
			db, err := d.SQL()
			if err != nil {
				return err
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, `UPDATE users SET is_email_verified = true WHERE id = 1`)
			return err // rolled back by database/sql once ctx is cancelled
		}},
		{"own connection closed inside its transaction", func(ctx context.Context, d *harness.Delivery) error {
			c, err := pgx.Connect(ctx, d.DSN)
			if err != nil {
				return err
			}
			defer c.Close(ctx)
			if _, err := c.Exec(ctx, `BEGIN`); err != nil {
				return err
			}
			_, err = c.Exec(ctx, `UPDATE users SET is_email_verified = true WHERE id = 1`)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := harness.Job{Name: "left-open", Handler: tc.handler}
			cfg := harness.Config{Setup: []harness.Setup{harness.SQL(usersSchema)}, Faults: []faults.Fault{faults.RunTwice()},
				ExpectNoWork: "its only write never commits"}
			rec := recordtb.New(t)
			rec.Run(func(tb testing.TB) { harness.Check(tb, job, cfg) })
			require.Len(t, rec.Errors(), 1, "logs %q", rec.Logs())
			assert.Contains(t, rec.Errors()[0], "deliveries returned with a connection still in a transaction or busy")
			assert.Contains(t, rec.Errors()[0], "This pass may be wrong, so the check fails; if that is expected here, accept it: Config.AcceptWarnings: []result.WarningKind{result.TransactionLeftOpen}")

			cfg.AcceptWarnings = []result.WarningKind{result.TransactionLeftOpen}
			res, err := harness.Run(t.Context(), job, cfg)
			require.NoError(t, err)
			assert.True(t, res.Idempotent(), "%s", res)
			require.Len(t, res.Warnings, 1)
			assert.Equal(t, result.TransactionLeftOpen, res.Warnings[0].Kind)
			assert.Equal(t, 4, res.Warnings[0].Deliveries, "every delivery of the clean runs and the scenario")
		})
	}
}

// A handler that ends every transaction it begins leaves nothing open,
// on every client, under every default fault: no warning at all. (The
// proxy once decided it from how soon its relay came back to reading
// the client, which on a loaded machine could take longer than its
// 20 ms grace: a correct job failed once in 30 repeats.)
func TestNothingLeftOpenOnEveryClient(t *testing.T) {
	const update = `UPDATE users SET is_email_verified = true WHERE id = 1`
	for _, tc := range []struct {
		name    string
		handler func(ctx context.Context, d *harness.Delivery) error
	}{
		{"pgxpool statement", func(ctx context.Context, d *harness.Delivery) error {
			_, err := d.DB.Exec(ctx, update)
			return err
		}},
		{"pgxpool transaction committed", func(ctx context.Context, d *harness.Delivery) error {
			return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, update)
				return err
			})
		}},
		{"database/sql transaction committed", func(ctx context.Context, d *harness.Delivery) error {
			db, err := d.SQL()
			if err != nil {
				return err
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback() }()
			if _, err := tx.ExecContext(ctx, update); err != nil {
				return err
			}
			return tx.Commit()
		}},
		{"own connection, transaction committed, closed", func(ctx context.Context, d *harness.Delivery) error {
			c, err := pgx.Connect(ctx, d.DSN)
			if err != nil {
				return err
			}
			defer c.Close(ctx)
			return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, update)
				return err
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := harness.Run(t.Context(), harness.Job{Name: "closes-all", Handler: tc.handler},
				harness.Config{Setup: []harness.Setup{harness.SQL(usersSchema)}})
			require.NoError(t, err)
			assert.True(t, res.Idempotent(), "%s", res)
			assert.Greater(t, len(res.Scenarios), 10, "every default fault")
			assert.Empty(t, res.Warnings)
		})
	}
}
