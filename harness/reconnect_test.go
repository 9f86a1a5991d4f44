package harness_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// After an ambiguous commit the delivery lives on, as a worker does after
// a network error: its handler may connect again and retry the
// transaction inside the same delivery, and twice judges what the retry
// did.

const retrySchema = `
CREATE TABLE counter (n int NOT NULL);
INSERT INTO counter VALUES (0);
CREATE TABLE processed (order_id bigint PRIMARY KEY);
`

// retryTx runs body in a transaction, as pgx.BeginFunc does, and runs it
// again on a new connection of the pool when it fails, up to three times:
// the retry loop handlers write for a lost connection.
func retryTx(ctx context.Context, d *harness.Delivery, body func(pgx.Tx) error) error {
	var err error
	for range 3 {
		if err = pgx.BeginFunc(ctx, d.DB, body); err == nil {
			return nil
		}
	}
	return err
}

// creditOnce marks the order processed in the transaction that credits
// it: a retry of a transaction that did commit finds the mark.
func creditOnce(ctx context.Context, tx pgx.Tx) error {
	tag, err := tx.Exec(ctx, `INSERT INTO processed VALUES (9812) ON CONFLICT DO NOTHING`)
	if err != nil || tag.RowsAffected() == 0 {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE counter SET n = n + 1`)
	return err
}

func creditBlindly(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `UPDATE counter SET n = n + 1`)
	return err
}

func TestRetryAfterAmbiguousCommit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    func(context.Context, pgx.Tx) error
		steps   []string // the first delivery's completed steps
		verdict result.Verdict
	}{
		{
			"pgx retry loop with a processed mark", creditOnce,
			// The lost COMMIT is none; the retry finds the mark.
			[]string{"begin", "INSERT INTO processed VALUES (9812) ON CONFLICT DO NOTHING", "UPDATE counter SET n = n + 1",
				"begin", "INSERT INTO processed VALUES (9812) ON CONFLICT DO NOTHING", "commit"},
			result.Idempotent,
		},
		{
			"pgx retry loop that increments", creditBlindly,
			[]string{"begin", "UPDATE counter SET n = n + 1", "begin", "UPDATE counter SET n = n + 1", "commit"},
			result.NotIdempotent,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := harness.Job{Name: "retrying", Handler: func(ctx context.Context, d *harness.Delivery) error {
				return retryTx(ctx, d, func(tx pgx.Tx) error { return tc.body(ctx, tx) })
			}}
			res, err := harness.Run(t.Context(), job, harness.Config{
				Setup:  []harness.Setup{harness.SQL(retrySchema)},
				Faults: []faults.Fault{faults.AmbiguousCommits()},
			})
			require.NoError(t, err)
			t.Cleanup(func() { res.DropDatabases(context.Background()) })
			require.Len(t, res.Scenarios, 1)
			sc := res.Scenarios[0]
			assert.Equal(t, tc.verdict, sc.Verdict, "state diff %v", sc.StateDiff)
			first := sc.Deliveries[0]
			assert.Equal(t, &result.StepTaken{Step: faults.Step{SQL: "commit", CommitPoint: true}, Fate: result.ReplyLost}, first.Faulted())
			assert.Empty(t, first.Err, "the retry on a new connection succeeded and the delivery returned nil")
			var steps []string
			for _, s := range first.Completed() {
				steps = append(steps, s.SQL)
			}
			assert.Equal(t, tc.steps, steps, "the first attempt's steps but the lost COMMIT, then the retry's on a new connection")
			if tc.verdict == result.NotIdempotent {
				require.Len(t, sc.StateDiff, 1)
				assert.Equal(t, "counter", sc.StateDiff[0].Table)
			}
		})
	}
}

// A database/sql handler that keeps one connection (for its session's
// settings, say) learns on its next use that the connection went bad
// (driver.ErrBadConn), takes a new one and retries.
func TestDatabaseSQLRetryOnBadConn(t *testing.T) {
	var badConns atomic.Int32
	job := harness.Job{Name: "database/sql retrying", Handler: func(ctx context.Context, d *harness.Delivery) error {
		db, err := sql.Open("pgx", d.DSN)
		if err != nil {
			return err
		}
		defer db.Close()
		conn, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close() }()
		for attempt := 1; ; attempt++ {
			err = creditSQL(ctx, conn)
			switch {
			case err == nil || attempt == 3:
				return err
			case errors.Is(err, driver.ErrBadConn):
				badConns.Add(1)
				_ = conn.Close()
				if conn, err = db.Conn(ctx); err != nil {
					return err
				}
			}
		}
	}}
	res, err := harness.Run(t.Context(), job, harness.Config{
		Setup:  []harness.Setup{harness.SQL(retrySchema)},
		Faults: []faults.Fault{faults.AmbiguousCommits(), faults.RunTwice()},
	})
	require.NoError(t, err)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })
	require.Len(t, res.Scenarios, 2)
	for _, sc := range res.Scenarios {
		assert.Equal(t, result.Idempotent, sc.Verdict, "%s: %v", sc.Schedule, sc.StateDiff)
	}
	first := res.Scenarios[0].Deliveries[0]
	assert.Equal(t, "step 4 was applied but its reply was lost: commit", first.Fault)
	assert.Empty(t, first.Err, "the retry on a new connection succeeded")
	assert.Positive(t, badConns.Load(), "the kept connection reported driver.ErrBadConn")
}

// creditSQL is creditOnce through database/sql.
func creditSQL(ctx context.Context, conn *sql.Conn) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `INSERT INTO processed VALUES (9812) ON CONFLICT DO NOTHING`)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE counter SET n = n + 1`); err != nil {
		return err
	}
	return tx.Commit()
}
