package harness_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/recordtb"
)

const mailedSchema = `CREATE TABLE orders (id int PRIMARY KEY, mailed bool NOT NULL DEFAULT false)`

// mailInTransaction skips an order already mailed, else inserts it, mails
// the customer and marks it mailed, in one transaction: steps SELECT,
// BEGIN, INSERT, email, UPDATE, COMMIT. A crash after the email and
// before the COMMIT rolls the order back with the email sent, so the
// redelivery mails again: only crash points 5 and 6 find it.
func mailInTransaction(ctx context.Context, d *harness.Delivery) error {
	var mailed bool
	err := d.DB.QueryRow(ctx, `SELECT mailed FROM orders WHERE id = 1`).Scan(&mailed)
	if err == nil && mailed {
		return nil
	}
	return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES (1) ON CONFLICT DO NOTHING`); err != nil {
			return err
		}
		if err := d.Mail().Send(ctx, effects.Email{To: "a@example.com", Subject: "Order 1"}); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE orders SET mailed = true WHERE id = 1`)
		return err
	})
}

func crashAt(sc result.Scenario) int { return sc.Schedule.Deliveries[0].At }

// An effect call between two statements of one transaction splits its
// crash points in two classes, and the bug only the second one shows
// (an email sent, then rolled back under it) is found.
func TestEffectSplitsTheCrashClass(t *testing.T) {
	job := harness.Job{Name: "mail-in-tx", Handler: mailInTransaction}
	res, err := harness.Run(t.Context(), job, harness.Config{
		Setup:  []harness.Setup{harness.SQL(mailedSchema)},
		Faults: []faults.Fault{faults.CrashAtEveryStep()},
	})
	require.NoError(t, err)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })

	require.Len(t, res.Steps, 6, "SELECT, BEGIN, INSERT, email, UPDATE, COMMIT: %v", res.Steps)
	require.Len(t, res.Reductions, 1)
	red := res.Reductions[0]
	assert.Nil(t, red.Diverged)
	var classes [][2]int
	for _, c := range red.Classes {
		classes = append(classes, [2]int{c.From, c.To})
	}
	assert.Equal(t, [][2]int{{1, 4}, {5, 6}}, classes, "the email (step 4) ends the first class")
	assert.Equal(t, 2, red.Orders)
	assert.Equal(t, 4, red.Pruned)

	verdicts := map[int]result.Verdict{}
	for _, sc := range res.Scenarios {
		verdicts[crashAt(sc)] = sc.Verdict
	}
	assert.Equal(t, result.Idempotent, verdicts[4], "a crash before the email sends it once")
	assert.NotEqual(t, result.Idempotent, verdicts[6], "a crash after the email and before COMMIT sends it twice")
	assert.Len(t, verdicts, 2, "one crash point per class ran: %v", verdicts)
	assert.Equal(t, result.OutcomeFinding, res.Outcome)
}

// A commit point ends a class too: a job that commits, then mails, and
// skips the email on a redelivery that finds the row, loses the email
// only when it crashes between the COMMIT and the email.
func TestCommitSplitsTheCrashClass(t *testing.T) {
	inTx := harness.Job{Name: "commit-then-mail", Handler: func(ctx context.Context, d *harness.Delivery) error {
		var inserted bool
		err := pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES (1) ON CONFLICT DO NOTHING`)
			inserted = tag.RowsAffected() > 0
			return err
		})
		if err != nil || !inserted {
			return err
		}
		return d.Mail().Send(ctx, effects.Email{To: "a@example.com", Subject: "Order 1"})
	}}
	res, err := harness.Run(t.Context(), inTx, harness.Config{
		Setup:  []harness.Setup{harness.SQL(mailedSchema)},
		Faults: []faults.Fault{faults.CrashAtEveryStep()},
	})
	require.NoError(t, err)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })

	require.Len(t, res.Steps, 5, "BEGIN, SELECT, INSERT, COMMIT, email: %v", res.Steps)
	require.Len(t, res.Reductions, 1)
	require.Len(t, res.Reductions[0].Classes, 1)
	c := res.Reductions[0].Classes[0]
	assert.Equal(t, [2]int{1, 4}, [2]int{c.From, c.To}, "the COMMIT (step 4) ends the class")
	verdicts := map[int]result.Verdict{}
	for _, sc := range res.Scenarios {
		verdicts[crashAt(sc)] = sc.Verdict
	}
	assert.Equal(t, map[int]result.Verdict{4: result.Idempotent, 5: verdicts[5]}, verdicts)
	assert.NotEqual(t, result.Idempotent, verdicts[5], "a crash after the COMMIT, before the email, loses it")
}

// divergingInTx takes BEGIN, SELECT 1, INSERT, COMMIT in its first two
// runs (the clean ones) and SELECT 2 instead of SELECT 1 from then on:
// a representative whose first delivery takes another statement inside
// its class than the clean run did.
func divergingInTx(calls *atomic.Int64) harness.Handler {
	return func(ctx context.Context, d *harness.Delivery) error {
		read := `SELECT 1`
		if calls.Add(1) > 2 {
			read = `SELECT 2`
		}
		return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, read); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES (1) ON CONFLICT DO NOTHING`)
			return err
		})
	}
}

// When the representative of a crash class took other steps inside the
// class than the clean run, the crash points left out run too, and the
// result says where.
func TestCrashClassFallsBackWhenTheDeliveryDiverges(t *testing.T) {
	var calls atomic.Int64
	job := harness.Job{Name: "diverging-in-tx", Handler: divergingInTx(&calls)}
	res, err := harness.Run(t.Context(), job, harness.Config{
		Setup:  []harness.Setup{harness.SQL(mailedSchema)},
		Faults: []faults.Fault{faults.CrashAtEveryStep(), faults.Redrive(faults.DefaultRedriveAfter)},
	})
	require.NoError(t, err)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })
	require.Len(t, res.Steps, 4)
	require.Equal(t, "SELECT 1", res.Steps[1].SQL)

	require.Len(t, res.Reductions, 2)
	for _, red := range res.Reductions {
		require.NotNil(t, red.Diverged, "%s: the representative took SELECT 2 where the clean run took SELECT 1", red.Fault)
		assert.Equal(t, 1, red.Diverged.Delivery)
		assert.Equal(t, 2, red.Diverged.At)
		require.NotNil(t, red.Diverged.Took)
		assert.Equal(t, "SELECT 2", red.Diverged.Took.SQL)
		assert.Equal(t, 3, red.Pruned)
	}
	// Every crash point ran, once.
	got := map[string]int{}
	for _, sc := range res.Scenarios {
		got[fmt.Sprintf("%s:%d", sc.Fault, crashAt(sc))]++
	}
	assert.Equal(t, map[string]int{
		"crash-mid-job:1": 1, "crash-mid-job:2": 1, "crash-mid-job:3": 1, "crash-mid-job:4": 1,
		"redrive:1": 1, "redrive:2": 1, "redrive:3": 1, "redrive:4": 1, "redrive:0": 1,
	}, got)
	assert.True(t, res.Idempotent(), "%s", res)
}

// Without a divergence the same job runs one crash point of its class.
func TestCrashClassRunsOnce(t *testing.T) {
	var calls atomic.Int64
	calls.Store(-1 << 40) // never diverges
	job := harness.Job{Name: "steady-in-tx", Handler: divergingInTx(&calls)}
	res, err := harness.Run(t.Context(), job, harness.Config{
		Setup:  []harness.Setup{harness.SQL(mailedSchema)},
		Faults: []faults.Fault{faults.CrashAtEveryStep()},
	})
	require.NoError(t, err)
	require.Len(t, res.Scenarios, 1)
	assert.Equal(t, 4, crashAt(res.Scenarios[0]))
	require.Len(t, res.Reductions, 1)
	assert.Nil(t, res.Reductions[0].Diverged)
	assert.Equal(t, 3, res.Reductions[0].Pruned)
}

// A check-then-act inside one transaction is still found: the
// visibility-timeout scenario paused between its check and its act is
// not merged with the others.
func TestCheckThenActInTransactionStillFound(t *testing.T) {
	job := harness.Job{Name: "check-then-act", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM log WHERE what = 'sent'`).Scan(&n); err != nil || n > 0 {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO log (what) VALUES ('sent')`)
			return err
		})
	}}
	res, err := harness.Run(t.Context(), job, harness.Config{
		Setup: []harness.Setup{harness.SQL(`CREATE TABLE log (id serial PRIMARY KEY, what text NOT NULL)`)},
	})
	require.NoError(t, err)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })
	var failed []string
	for _, sc := range res.Failed() {
		failed = append(failed, sc.Schedule.String())
	}
	assert.Contains(t, failed, "j1a1w1 > +30s j1a2w2@1:2 order 1,1,2,2,2,2,1,1", "paused after the check, before the act")
	for _, sc := range res.Scenarios {
		if sc.Fault == faults.NameCrashMidJob || sc.Fault == faults.NameRedrive {
			assert.Equal(t, result.Idempotent, sc.Verdict, "%s", sc.Schedule)
		}
	}
}

// Under -v a passing check says which crash points ran for their class.
func TestCrashClassIsLogged(t *testing.T) {
	defer harness.SetVerbose(time.Hour)()
	rec := recordtb.New(t)
	var calls atomic.Int64
	calls.Store(-1 << 40)
	job := harness.Job{Name: "logged", Handler: divergingInTx(&calls)}
	rec.Run(func(tb testing.TB) {
		harness.Check(tb, job, harness.Config{
			Setup:  []harness.Setup{harness.SQL(mailedSchema)},
			Faults: []faults.Fault{faults.CrashAtEveryStep()},
		})
	})
	require.Empty(t, rec.Errors())
	var lines []string
	for _, l := range rec.Logs() {
		if strings.Contains(l, "crash-mid-job: ") {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 1, "logs %q", rec.Logs())
	assert.Equal(t, `[twice] job "logged": crash-mid-job: the 4 crash points at steps 1..4, with no commit point or effect call between them, end in the same state: one run (j1a1w1!crash:4 > +30s j1a2w2); 1 crash point run in all, 3 left out`, lines[0])
}

// A visibility-timeout pause inside a transaction whose upserts the
// second delivery waits on: the pauses after the first upsert up to
// before the COMMIT end alike, so one runs, and the result says so.
func TestPauseClassRunsOnceWhenTheSecondDeliveryWaits(t *testing.T) {
	res, err := harness.Run(t.Context(), transactionJob(8), harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE rows (id int PRIMARY KEY)`)},
		Faults: []faults.Fault{faults.VisibilityTimeout()},
	})
	require.NoError(t, err)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })
	require.Len(t, res.Steps, 10, "BEGIN, 8 upserts, COMMIT")
	require.Len(t, res.Reductions, 1)
	red := res.Reductions[0]
	assert.Nil(t, red.Unwaited)
	require.Len(t, red.Pauses, 1)
	assert.Equal(t, [2]int{2, 9}, [2]int{red.Pauses[0].From, red.Pauses[0].To})
	var after []int
	for _, sc := range res.Scenarios {
		after = append(after, sc.Schedule.Deliveries[1].After)
	}
	assert.Equal(t, []int{1, 2, 10}, after, "after BEGIN, after the first upsert (for 2..9), after COMMIT")
	assert.Equal(t, 7, red.Pruned)
	assert.True(t, res.Idempotent(), "%s", res)
}

// A check-then-act inside a transaction that takes no lock the second
// delivery waits on: the pause class's representative (after the check)
// shows no wait, so the other pause points run too, and the bug is
// found.
func TestPauseClassFallsBackWithoutAWait(t *testing.T) {
	job := harness.Job{Name: "lock-then-check", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM log WHERE what = 'sent'`).Scan(&n); err != nil || n > 0 {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO log (what) VALUES ('sent')`)
			return err
		})
	}}
	res, err := harness.Run(t.Context(), job, harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE log (id serial PRIMARY KEY, what text NOT NULL)`)},
		Faults: []faults.Fault{faults.VisibilityTimeout()},
	})
	require.NoError(t, err)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })
	require.Len(t, res.Reductions, 1)
	red := res.Reductions[0]
	require.NotNil(t, red.Unwaited, "the second delivery waits on nothing")
	assert.Equal(t, 2, red.Unwaited.Deliveries[1].After)
	failedAfter := map[int]bool{}
	ran := map[int]bool{}
	for _, sc := range res.Scenarios {
		ran[sc.Schedule.Deliveries[1].After] = true
		if sc.Verdict != result.Idempotent {
			failedAfter[sc.Schedule.Deliveries[1].After] = true
		}
	}
	assert.Equal(t, map[int]bool{1: true, 2: true, 3: true, 4: true, 5: true}, ran, "every pause point ran")
	assert.True(t, failedAfter[3], "paused between the check and the act (a point left out, run on the fallback): %v", failedAfter)
}
