package harness_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/recordtb"
)

const ordersFixture = `CREATE TABLE orders (id bigint PRIMARY KEY, n int NOT NULL); INSERT INTO orders VALUES (9812, 0)`

func bumpOrder(id int) harness.Handler {
	return func(ctx context.Context, d *harness.Delivery) error {
		_, err := d.DB.Exec(ctx, `UPDATE orders SET n = n + 1 WHERE id = $1`, id)
		return err
	}
}

// A check whose clean run wrote no row and made no effect proves nothing:
// the fixture lacks the row the job updates, so every scenario would pass
// (issue 38, Why 1). It is the user's error, naming the statement that
// changed nothing and the two ways out; with the row there, the same job
// is found.
func TestACheckThatProvesNothingIsRefused(t *testing.T) {
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(ordersFixture)}}
	res, err := harness.Run(t.Context(), harness.Job{Name: "bump", Handler: bumpOrder(9813)}, cfg)
	require.Error(t, err, "a pass that the job's work cannot back: %v", res)
	assert.True(t, blame.IsUser(err))
	assert.Contains(t, err.Error(), `job "bump": this check proves nothing: its clean run wrote no row and made no effect`)
	assert.Contains(t, err.Error(), "Its 1 statement changed no row: `UPDATE orders SET n = n + 1 WHERE id = $1`.")
	assert.Contains(t, err.Error(), "Config.ExpectNoWork")

	res, err = harness.Run(t.Context(), harness.Job{Name: "bump", Handler: bumpOrder(9812)}, cfg)
	require.NoError(t, err)
	assert.False(t, res.Idempotent(), "the increment on the fixture's row is found")
}

// A handler that works through a connection of its own takes no step
// twice sees: the refusal says so.
func TestACheckThatSawNothingIsRefused(t *testing.T) {
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(ordersFixture)}}
	_, err := harness.Run(t.Context(), harness.Job{Name: "elsewhere", Handler: func(context.Context, *harness.Delivery) error { return nil }}, cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `job "elsewhere" took no step, on its clean run or in any scenario`)
}

// A job that rightly does nothing on its fixture says so, and passes; once
// it does write, the mark is refused.
func TestExpectNoWork(t *testing.T) {
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(ordersFixture)}, ExpectNoWork: "order 9813 is not ours to bump"}
	res, err := harness.Run(t.Context(), harness.Job{Name: "bump", Handler: bumpOrder(9813)}, cfg)
	require.NoError(t, err)
	assert.True(t, res.Idempotent())

	_, err = harness.Run(t.Context(), harness.Job{Name: "bump", Handler: bumpOrder(9812)}, cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `job "bump" is marked as doing nothing (Config.ExpectNoWork: order 9813 is not ours to bump), but its clean run wrote 1 row and made 0 effects: remove Config.ExpectNoWork`)
}

// An effect is work: a job that only sends an email is checked.
func TestAnEffectIsWork(t *testing.T) {
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(ordersFixture)}}
	res, err := harness.Run(t.Context(), harness.Job{Name: "mail", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return d.Mail().Send(ctx, effects.Email{To: "a@example.com", Subject: "hello"})
	}}, cfg)
	require.NoError(t, err)
	assert.False(t, res.Idempotent(), "an email sent on every delivery is found")
}

// A dedup map kept in Job.Handler's closure is shared by every delivery,
// where production rebuilds it after a crash: the redelivery skips on
// memory, takes no step, and the check passed (issue 38, Why 3). It now
// fails, saying to build the handler per worker; built so, the double
// bump is found.
func TestMemoryInTheHandlerClosureIsNoPass(t *testing.T) {
	dedup := func() harness.Handler {
		var seen sync.Map // deliveries and scenarios run side by side
		return func(ctx context.Context, d *harness.Delivery) error {
			if _, done := seen.LoadOrStore(d.JobID, true); done {
				return nil
			}
			return bumpOrder(9812)(ctx, d)
		}
	}
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(ordersFixture)}}
	_, err := harness.Run(t.Context(), harness.Job{Name: "dedup", Handler: dedup()}, cfg)
	require.Error(t, err)
	assert.True(t, blame.IsUser(err))
	assert.Contains(t, err.Error(), "use Job.NewWorker to build the handler per worker, or keep the record in the database")

	res, err := harness.Run(t.Context(), harness.Job{Name: "dedup", NewWorker: dedup}, cfg)
	require.NoError(t, err)
	assert.False(t, res.Idempotent(), "a fresh worker after a crash bumps again")
}

const paidFixture = `CREATE TABLE orders (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0, paid_at timestamptz,
	created_at timestamptz NOT NULL DEFAULT now());
INSERT INTO orders (id) VALUES (9812)`

// A value two clean runs call noise is still a finding when a retry
// rewrote it (issue 38, Why 2): paid_at from time.Now() and n from a
// per-process counter differ between clean runs, so the state diff left
// them out and the check passed, while the same job with d.Now was a
// finding. The write history shows the retry rewrote the stored value.
// A row written once (a guarded update, a created_at DEFAULT now() on a
// row inserted once) keeps its volatile columns out.
func TestRetryThatRewritesNoiseIsFound(t *testing.T) {
	var counter atomic.Int64
	for _, tc := range []struct {
		name, sql string
		arg       func() any
		column    string // "" for a job that must pass
	}{
		{"paid_at from time.Now()", `UPDATE orders SET paid_at = $1 WHERE id = 9812`, func() any { return time.Now() }, "paid_at"},
		{"a per-process counter", `UPDATE orders SET n = n + $1 WHERE id = 9812`, func() any { return counter.Add(1) }, "n"},
		{"paid_at set once", `UPDATE orders SET paid_at = $1 WHERE id = 9812 AND paid_at IS NULL`, func() any { return time.Now() }, ""},
		{"a row inserted once", `INSERT INTO orders (id, paid_at) VALUES (1, $1) ON CONFLICT (id) DO NOTHING`, func() any { return time.Now() }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := harness.Job{Name: "pay", Handler: func(ctx context.Context, d *harness.Delivery) error {
				_, err := d.DB.Exec(ctx, tc.sql, tc.arg())
				return err
			}}
			cfg := harness.Config{Setup: []harness.Setup{harness.SQL(paidFixture)},
				Faults: []faults.Fault{faults.RunTwice(), faults.CrashBeforeAck()}}
			res, err := harness.Run(t.Context(), job, cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
			if tc.column == "" {
				assert.True(t, res.Idempotent(), "%v", res.Failed())
				return
			}
			require.False(t, res.Idempotent(), "volatile %v", res.Volatile)
			var found []result.Problem
			for _, sc := range res.Scenarios {
				for _, p := range sc.Problems {
					if p.Kind == result.StoredResultChanged {
						found = append(found, p)
					}
				}
			}
			require.NotEmpty(t, found)
			assert.Equal(t, "orders", found[0].Table)
			assert.Equal(t, "9812", found[0].Row)
			assert.Equal(t, tc.column, found[0].Column)
			assert.NotEqual(t, found[0].Before, found[0].After)
		})
	}
}

// A delivery the queue cancelled at its visibility timeout lives on
// (issue 41, Why 1): an effect call that does not carry its context, as
// stripe-go's calls without one or a mailer that takes none, is made, and
// the email it sends beside the redelivery's is found; the same call
// with the handler's context fails with it, and nothing is sent twice.
func TestCancelledIsNotDead(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ctxOf func(ctx context.Context) context.Context
		twice bool
	}{
		{"a call without the context", func(context.Context) context.Context { return context.Background() }, true},
		{"a call with the context", func(ctx context.Context) context.Context { return ctx }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := harness.Job{Name: "ship-mail", Queue: queue.Model{CancelAtVisibilityTimeout: true},
				Handler: func(ctx context.Context, d *harness.Delivery) error {
					if _, err := d.DB.Exec(ctx, `UPDATE orders SET n = 1 WHERE id = 9812`); err != nil {
						return err
					}
					return d.Mail().Send(tc.ctxOf(ctx), effects.Email{To: "a@example.com", Subject: "shipped"})
				}}
			cfg := harness.Config{Setup: []harness.Setup{harness.SQL(ordersFixture)}, Faults: []faults.Fault{faults.VisibilityTimeout()}}
			res, err := harness.Run(t.Context(), job, cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
			var paused *result.Scenario
			for i, sc := range res.Scenarios {
				if sc.Schedule.Deliveries[1].After == 1 {
					paused = &res.Scenarios[i]
				}
			}
			require.NotNil(t, paused, "a scenario that overlaps the two deliveries after step 1")
			assert.Contains(t, paused.Deliveries[0].Fault, "context cancelled at the visibility timeout")
			emails := 0
			for _, e := range paused.Effects {
				if e.Kind == "email" {
					emails++
				}
			}
			if tc.twice {
				assert.Equal(t, 2, emails, "the cancelled delivery's email is sent, as in production")
				assert.Equal(t, result.NotIdempotent, paused.Verdict)
			} else {
				assert.Equal(t, 1, emails)
				assert.Equal(t, result.Idempotent, paused.Verdict, "%v", paused.Problems)
			}
		})
	}
}

// A handler that panics on its retry printed one paragraph per schedule,
// a dozen alike, and no stack (issue 37). The panic is now one paragraph:
// its value, where it first happened, its stack from the panic's site
// down to the handler (no frame of twice's), and the other schedules.
func TestPanicIsOneParagraphWithItsStack(t *testing.T) {
	job := harness.Job{Name: "panics-on-retry", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if d.Attempt > 1 {
			panic("no ledger for a retry")
		}
		_, err := d.DB.Exec(ctx, `UPDATE orders SET n = 1 WHERE id = 9812`)
		return err
	}}
	rec := recordtb.New(t)
	var res *harness.Result
	rec.Run(func(tb testing.TB) {
		res = harness.Check(tb, job, harness.Config{Setup: []harness.Setup{harness.SQL(ordersFixture)},
			Faults: []faults.Fault{faults.RunTwice(), faults.CrashBeforeAck(), faults.LostAck(), faults.CrashAtEveryStep()}})
	})
	require.NotNil(t, res)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	require.Len(t, rec.Errors(), 1)
	msg := rec.Errors()[0]
	assert.Equal(t, 1, strings.Count(msg, "the handler panicked: no ledger for a retry"), msg)
	assert.Contains(t, msg, "first in run-twice (schedule j1a1w1 > j1a2w2), delivery j1a2w2 (attempt 2)")
	assert.Contains(t, msg, "stack from the panic:")
	assert.Contains(t, msg, "vacuity_test.go:", "the stack names the handler's line")
	assert.NotContains(t, msg, "internal/execute.", "no frame of twice's")
	assert.Contains(t, msg, "the same panic under 4 more schedules:")
	assert.Less(t, strings.Count(msg, "\n"), 30, msg)
	for _, sc := range res.Failed() {
		require.NotNil(t, sc.Deliveries[len(sc.Deliveries)-1].Panic, sc.Schedule.String())
	}
}
