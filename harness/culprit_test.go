package harness_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/recordtb"
)

const culpritFixture = `CREATE TABLE customers (id bigint PRIMARY KEY, points int NOT NULL, note text);
INSERT INTO customers VALUES (77, 120, '');
CREATE TABLE receipts (id bigserial PRIMARY KEY, customer bigint NOT NULL);`

// A finding names who made the difference (issue 39, from issue 38's
// write history): the delivery and step whose write the clean run does
// not make, the row and its change, and the pattern it shows, decided
// from the history: an increment applied again, a second insert. A
// write of no known pattern is named with none; a job that writes the
// same twice names no culprit.
func TestFindingNamesTheCulprit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler harness.Handler
		step    int
		sql     string
		table   string
		changes []result.Change
		pattern result.Pattern
	}{
		{"an increment", func(ctx context.Context, d *harness.Delivery) error {
			_, err := d.DB.Exec(ctx, `UPDATE customers SET points = points + 50 WHERE id = 77`)
			return err
		}, 1, "UPDATE customers SET points = points + 50 WHERE id = 77", "customers",
			[]result.Change{{Column: "points", Before: "170", After: "220"}}, result.IncrementWithoutRecord},
		{"an increment in a transaction, through database/sql", func(ctx context.Context, d *harness.Delivery) error {
			db, err := d.SQL()
			if err != nil {
				return err
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback() }()
			if _, err := tx.ExecContext(ctx, `SELECT points FROM customers WHERE id = $1`, 77); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE customers SET points = points + $1 WHERE id = $2`, 50, 77); err != nil {
				return err
			}
			return tx.Commit()
		}, 3, "UPDATE customers SET points = points + $1 WHERE id = $2", "customers",
			[]result.Change{{Column: "points", Before: "170", After: "220"}}, result.IncrementWithoutRecord},
		{"a second receipt", func(ctx context.Context, d *harness.Delivery) error {
			_, err := d.DB.Exec(ctx, `INSERT INTO receipts (customer) VALUES (77)`)
			return err
		}, 1, "INSERT INTO receipts (customer) VALUES (77)", "receipts", nil, result.InsertWithoutKey},
		{"a note per attempt, a result changed", func(ctx context.Context, d *harness.Delivery) error {
			_, err := d.DB.Exec(ctx, `UPDATE customers SET note = note || 'x' WHERE id = 77`)
			return err
		}, 1, "UPDATE customers SET note = note || 'x' WHERE id = 77", "customers",
			[]result.Change{{Column: "note", Before: `"x"`, After: `"xx"`}}, result.ResultChanged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := harness.Run(t.Context(), harness.Job{Name: "reward", Handler: tc.handler},
				harness.Config{Setup: []harness.Setup{harness.SQL(culpritFixture)}, Faults: []faults.Fault{faults.RunTwice()}})
			require.NoError(t, err)
			t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
			require.Len(t, res.Scenarios, 1)
			sc := res.Scenarios[0]
			require.Equal(t, result.NotIdempotent, sc.Verdict)
			require.Len(t, sc.Culprits, 1, "%+v", sc.Culprits)
			c := sc.Culprits[0]
			assert.Equal(t, "j1a2w2", c.Delivery.Label(), "the redelivery did it")
			assert.Equal(t, tc.step, c.Step)
			assert.Equal(t, tc.sql, c.SQL)
			assert.Equal(t, tc.table, c.Table)
			if tc.changes != nil {
				assert.Equal(t, tc.changes, c.Changes)
			}
			assert.Equal(t, tc.pattern, c.Pattern)
		})
	}

	t.Run("a record keyed by the queue's job ID", func(t *testing.T) {
		res, err := harness.Run(t.Context(), harness.Job{Name: "reward", Handler: func(ctx context.Context, d *harness.Delivery) error {
			_, err := d.DB.Exec(ctx, `INSERT INTO processed (job_id) VALUES ($1) ON CONFLICT DO NOTHING`, d.JobID)
			return err
		}}, harness.Config{Setup: []harness.Setup{harness.SQL(`CREATE TABLE processed (job_id text PRIMARY KEY)`)},
			Faults: []faults.Fault{faults.ProducerRetry()}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
		require.Len(t, res.Scenarios, 1)
		require.Len(t, res.Scenarios[0].Culprits, 1)
		c := res.Scenarios[0].Culprits[0]
		assert.Equal(t, "j2a1w2", c.Delivery.Label(), "the producer's copy did it")
		assert.Equal(t, result.KeyPerEnqueue, c.Pattern)
	})

	// A pgx.Batch is one step whose statements the server starts one by
	// one: each statement's rows are the step's, not only the first's.
	t.Run("an increment in a batch", func(t *testing.T) {
		res, err := harness.Run(t.Context(), harness.Job{Name: "reward", Handler: func(ctx context.Context, d *harness.Delivery) error {
			b := &pgx.Batch{}
			b.Queue(`UPDATE customers SET note = 'seen' WHERE id = 77`)
			b.Queue(`UPDATE customers SET points = points + 50 WHERE id = 77`)
			return d.DB.SendBatch(ctx, b).Close()
		}}, harness.Config{Setup: []harness.Setup{harness.SQL(culpritFixture)}, Faults: []faults.Fault{faults.RunTwice()}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
		require.Len(t, res.Scenarios, 1)
		var points *result.Culprit
		for i, c := range res.Scenarios[0].Culprits {
			if c.SQL == `UPDATE customers SET points = points + 50 WHERE id = 77` {
				points = &res.Scenarios[0].Culprits[i]
			}
		}
		require.NotNil(t, points, "%+v", res.Scenarios[0].Culprits)
		assert.Equal(t, "j1a2w2", points.Delivery.Label(), "the redelivery's batch did it")
		assert.Equal(t, 1, points.Step, "the batch is the delivery's step 1")
		assert.Equal(t, result.IncrementWithoutRecord, points.Pattern)
	})

	t.Run("an upsert of the same values", func(t *testing.T) {
		res, err := harness.Run(t.Context(), harness.Job{Name: "reward", Handler: func(ctx context.Context, d *harness.Delivery) error {
			_, err := d.DB.Exec(ctx, `UPDATE customers SET points = 170 WHERE id = 77`)
			return err
		}}, harness.Config{Setup: []harness.Setup{harness.SQL(culpritFixture)}, Faults: []faults.Fault{faults.RunTwice()}})
		require.NoError(t, err)
		assert.True(t, res.Idempotent())
		assert.Empty(t, res.Scenarios[0].Culprits, "a table that does not differ has no culprit")
	})
}

// Effects name their culprits too, with the pattern their keys show, and
// each finding is ranked: an effect made twice first, a changed amount
// next, a changed timestamp alone last. A write the clean run makes and
// the scenario never does is named with the delivery the fault hit.
func TestEffectCulpritsAndSeverity(t *testing.T) {
	attempt := func(d *harness.Delivery) string { return fmt.Sprintf("%s-%d", d.JobID, d.Attempt) }
	for _, tc := range []struct {
		name     string
		handler  harness.Handler
		fault    faults.Fault
		op       string
		pattern  result.Pattern
		severity result.Severity
	}{
		{"an email on every delivery", func(ctx context.Context, d *harness.Delivery) error {
			return d.Mail().Send(ctx, effects.Email{To: "a@example.com", Subject: "hello"})
		}, faults.RunTwice(), "extra", result.EffectWithoutRecord, result.SeverityEffect},
		{"a payment keyed by attempt", func(ctx context.Context, d *harness.Delivery) error {
			_, err := d.Payments().Pay(ctx, effects.PaymentRequest{IdempotencyKey: attempt(d), Destination: "acct_1", Amount: 100, Currency: "eur"})
			return err
		}, faults.RunTwice(), "extra", result.KeyPerAttempt, result.SeverityEffect},
		{"a payment keyed by the queue's job ID, enqueued twice", func(ctx context.Context, d *harness.Delivery) error {
			_, err := d.Payments().Pay(ctx, effects.PaymentRequest{IdempotencyKey: d.JobID, Destination: "acct_1", Amount: 100, Currency: "eur"})
			return err
		}, faults.ProducerRetry(), "extra", result.KeyPerEnqueue, result.SeverityEffect},
		{"a timestamp rewritten", func(ctx context.Context, d *harness.Delivery) error {
			_, err := d.DB.Exec(ctx, `UPDATE customers SET seen = $1 WHERE id = 77`, d.Now())
			return err
		}, faults.CrashBeforeAck(), "update", result.ResultChanged, result.SeverityTime},
		{"points added twice", func(ctx context.Context, d *harness.Delivery) error {
			_, err := d.DB.Exec(ctx, `UPDATE customers SET points = points + 50 WHERE id = 77`)
			return err
		}, faults.RunTwice(), "update", result.IncrementWithoutRecord, result.SeverityMoney},
		{"a record trusted after a crash", func(ctx context.Context, d *harness.Delivery) error {
			tag, err := d.DB.Exec(ctx, `INSERT INTO receipts (id, customer) VALUES (1, 77) ON CONFLICT DO NOTHING`)
			if err != nil || tag.RowsAffected() == 0 {
				return err
			}
			_, err = d.DB.Exec(ctx, `UPDATE customers SET points = points + 50 WHERE id = 77`)
			return err
		}, faults.CrashAtEveryStep(), "missing update", result.WorkLost, result.SeverityState},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := harness.Run(t.Context(), harness.Job{Name: "reward", Handler: tc.handler},
				harness.Config{Setup: []harness.Setup{harness.SQL(culpritFixture + `ALTER TABLE customers ADD seen timestamptz;`)}, Faults: []faults.Fault{tc.fault}})
			require.NoError(t, err)
			t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
			failed := res.Failed()
			require.NotEmpty(t, failed)
			sc := failed[0]
			require.NotEmpty(t, sc.Culprits, "%+v", sc)
			c := sc.Culprits[0]
			assert.Equal(t, tc.op, c.Op)
			assert.Equal(t, tc.pattern, c.Pattern)
			assert.NotZero(t, c.Delivery.Job, "a delivery is named")
			if c.Op == "extra" {
				assert.Equal(t, 1, c.Step, "the effect's call is the delivery's step 1")
			}
			assert.Equal(t, tc.severity, sc.Severity)
		})
	}
}

// A known finding says how the job fails (Config.ExpectPattern): the
// check fails when its finding shows another pattern, naming those it
// shows, and a pattern without ExpectFinding, or one twice does not know,
// is a configuration error.
func TestExpectPattern(t *testing.T) {
	job := harness.Job{Name: "reward", Handler: func(ctx context.Context, d *harness.Delivery) error {
		_, err := d.DB.Exec(ctx, `UPDATE customers SET points = points + 50 WHERE id = 77`)
		return err
	}}
	cfg := func(p result.Pattern) harness.Config {
		return harness.Config{Setup: []harness.Setup{harness.SQL(culpritFixture)}, Faults: []faults.Fault{faults.RunTwice()},
			ExpectFinding: "adds 50 points on every delivery", ExpectPattern: p}
	}
	for _, tc := range []struct {
		pattern result.Pattern
		fails   string
	}{
		{result.IncrementWithoutRecord, ""},
		{result.CheckThenAct, "shows no check-then-act culprit (Config.ExpectPattern); its culprits show increment-without-record"},
	} {
		rec := recordtb.New(t)
		var res *harness.Result
		rec.Run(func(tb testing.TB) { res = harness.Check(tb, job, cfg(tc.pattern)) })
		require.NotNil(t, res)
		t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
		if tc.fails == "" {
			assert.Empty(t, rec.Errors())
			continue
		}
		require.Len(t, rec.Errors(), 1)
		assert.Contains(t, rec.Errors()[0], tc.fails)
	}

	c := cfg("increment")
	_, err := harness.Run(t.Context(), job, c)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `Config.ExpectPattern is "increment", which is no pattern of twice's`)
	c = cfg(result.IncrementWithoutRecord)
	c.ExpectFinding = ""
	_, err = harness.Run(t.Context(), job, c)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "without Config.ExpectFinding")
}
