package harness_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/pgserver"
)

// Each test here runs one schedule of a fault and shows, on the scenario's
// kept database or in what the handler saw, that the fault did what its
// name says.

const stepsSchema = `
CREATE TABLE log (attempt int NOT NULL, what text NOT NULL);
CREATE TABLE items (id int PRIMARY KEY, note text);
INSERT INTO items VALUES (1, NULL), (2, NULL);
`

func replay(t *testing.T, job harness.Job, schedule string, tweak ...func(*harness.Config)) *harness.Result {
	t.Helper()
	s, err := faults.Parse(schedule)
	require.NoError(t, err)
	cfg := harness.Config{
		Setup:  []harness.Setup{harness.SQL(stepsSchema)},
		Faults: []faults.Fault{faults.Replay(s)},
	}
	for _, f := range tweak {
		f(&cfg)
	}
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })
	require.Len(t, res.Scenarios, 1)
	return res
}

// rows returns the log of the scenario's kept database, "attempt:what".
func rows(t *testing.T, sc result.Scenario) []string {
	t.Helper()
	require.NotEmpty(t, sc.Database, "scenario %s kept no database", sc.Schedule)
	// The kept database is shown without its password: take the shared
	// server's, as a user's PGPASSWORD would give it.
	cfg, err := pgx.ParseConfig(sc.Database)
	require.NoError(t, err)
	srv, err := pgserver.Shared(t.Context())
	require.NoError(t, err)
	srvCfg, err := pgx.ParseConfig(srv.ConnString(""))
	require.NoError(t, err)
	cfg.Password = srvCfg.Password
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	rs, _ := conn.Query(t.Context(), `SELECT attempt || ':' || what FROM log ORDER BY attempt, what`)
	out, err := pgx.CollectRows(rs, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// logSteps writes a row outside a transaction, then one inside: steps
// INSERT a, BEGIN, INSERT b, COMMIT.
func logSteps(ctx context.Context, d *harness.Delivery) error {
	if _, err := d.DB.Exec(ctx, `INSERT INTO log VALUES ($1, 'a')`, d.Attempt); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO log VALUES ($1, 'b')`, d.Attempt)
		return err
	})
}

func TestCrashAtStep(t *testing.T) {
	var built atomic.Int32
	job := harness.Job{Name: "log", NewWorker: func() harness.Handler { built.Add(1); return logSteps }}
	built.Store(0)
	res := replay(t, job, "j1a1w1!crash:3 > +30s j1a2w2")
	sc := res.Scenarios[0]

	assert.Equal(t, []faults.Step{{SQL: "INSERT INTO log VALUES ($1, 'a')", CommitPoint: true, Autocommit: true}, {SQL: "begin", Local: true}, {SQL: "INSERT INTO log VALUES ($1, 'b')"}, {SQL: "commit", CommitPoint: true}}, res.Steps)
	assert.Equal(t, "crashed before step 3 reached the server: INSERT INTO log VALUES ($1, 'b')", sc.Deliveries[0].Fault)
	assert.Empty(t, sc.Deliveries[0].Err, "a dead delivery's return value is ignored")
	assert.Equal(t, &result.StepTaken{Step: faults.Step{SQL: "INSERT INTO log VALUES ($1, 'b')"}, Fate: result.CrashedBefore}, sc.Deliveries[0].Faulted(), "the step the crash kept from the server")
	assert.Equal(t, []result.Fate{result.Ran, result.Ran, result.CrashedBefore}, fates(sc.Deliveries[0]), "step 3 is its third, as Delivery.At names it")
	assert.Len(t, sc.Deliveries[0].Completed(), 2, "the crashed step is not among the completed ones")
	// Step 1 autocommitted and stays; the open transaction of steps 2-3
	// rolled back; the redelivery ran whole.
	assert.Equal(t, []string{"1:a", "2:a", "2:b"}, rows(t, sc))
	assert.Equal(t, int32(2+2+2), built.Load(), "two references, then a fresh worker for each delivery, in the failing scenario and in its confirming rerun")
}

func TestCrashBeforeAck(t *testing.T) {
	var seen sync.Map // attempt -> error the handler saw
	job := harness.Job{Name: "log", Handler: func(ctx context.Context, d *harness.Delivery) error {
		err := logSteps(ctx, d)
		seen.Store(d.Attempt, err)
		return err
	}}
	res := replay(t, job, "j1a1w1!crash > +30s j1a2w2")
	sc := res.Scenarios[0]
	assert.Equal(t, "crashed after its last step, before the ack", sc.Deliveries[0].Fault)
	first, _ := seen.Load(1)
	assert.Nil(t, first, "every step of the first delivery went through")
	assert.Equal(t, []string{"1:a", "1:b", "2:a", "2:b"}, rows(t, sc))
}

// A lost ack keeps the worker alive: an in-memory dedup map saves the
// redelivery to the same worker and not the one to another worker.
func TestLostAck(t *testing.T) {
	job := harness.Job{Name: "memo", NewWorker: func() harness.Handler {
		done := map[string]bool{}
		return func(ctx context.Context, d *harness.Delivery) error {
			if done[d.JobID] {
				return nil
			}
			done[d.JobID] = true
			return logSteps(ctx, d)
		}
	}}
	cfg := func(c *harness.Config) { c.Setup = []harness.Setup{harness.SQL(stepsSchema)} }
	same := replay(t, job, "j1a1w1!lostack > +30s j1a2w1", cfg).Scenarios[0]
	assert.Equal(t, result.Idempotent, same.Verdict, "the living worker remembers the job")
	assert.Equal(t, "returned nil, but its ack was lost", same.Deliveries[0].Fault)

	other := replay(t, job, "j1a1w1!lostack > +30s j1a2w2", cfg).Scenarios[0]
	assert.Equal(t, result.NotIdempotent, other.Verdict, "another worker does not")
	assert.Equal(t, []string{"1:a", "1:b", "2:a", "2:b"}, rows(t, other))
}

// The server applies the COMMIT, the reply never arrives: the row is in
// the database and the handler saw an error.
func TestAmbiguousCommit(t *testing.T) {
	var sawErr sync.Map
	job := harness.Job{Name: "log", Handler: func(ctx context.Context, d *harness.Delivery) error {
		err := logSteps(ctx, d)
		sawErr.Store(d.Attempt, err)
		return err
	}}
	res := replay(t, job, "j1a1w1!ambiguous:4 > +30s j1a2w2")
	sc := res.Scenarios[0]
	assert.Equal(t, "step 4 was applied but its reply was lost: commit", sc.Deliveries[0].Fault)
	assert.NotEmpty(t, sc.Deliveries[0].Err, "the delivery's own error path ran and its error counts")
	assert.Equal(t, &result.StepTaken{Step: faults.Step{SQL: "commit", CommitPoint: true}, Fate: result.ReplyLost}, sc.Deliveries[0].Faulted(), "the applied step whose reply was lost")
	assert.Nil(t, sc.Deliveries[1].Faulted())
	err, _ := sawErr.Load(1)
	assert.Error(t, err.(error))
	assert.Equal(t, []string{"1:a", "1:b", "2:a", "2:b"}, rows(t, sc), "the first delivery's transaction committed")
}

// Past the visibility timeout a second delivery starts on another worker
// after the first did k steps, both run on, and the harness clock moved.
func TestVisibilityTimeout(t *testing.T) {
	var mu sync.Mutex
	now := map[int]time.Time{}
	job := harness.Job{Name: "log", Handler: func(ctx context.Context, d *harness.Delivery) error {
		mu.Lock()
		now[d.Attempt] = d.Now()
		mu.Unlock()
		return logSteps(ctx, d)
	}}
	res := replay(t, job, "j1a1w1 > +30s j1a2w2@1:1 order 1,2,2,2,2,1,1,1")
	sc := res.Scenarios[0]
	assert.Equal(t, []int{1, 2, 2, 2, 2, 1, 1, 1}, sc.Order, "the second delivery ran its steps between the first's step 1 and 2")
	assert.Equal(t, []string{"1:a", "1:b", "2:a", "2:b"}, rows(t, sc))
	mu.Lock()
	defer mu.Unlock()
	assert.GreaterOrEqual(t, now[2].Sub(now[1]), 30*time.Second, "the redelivery came after the visibility timeout on the harness clock")
}

// A step that waits on a lock the other delivery holds does not stall the
// scenario: the executor asks the server and runs the other delivery.
func TestConcurrentDeliveryLockWait(t *testing.T) {
	job := harness.Job{Name: "lock", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT 1 FROM items WHERE id = 1 FOR UPDATE`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE items SET note = 'set' WHERE id = 1`)
			return err
		})
	}}
	// d1 takes the lock, d2's FOR UPDATE waits for it, d1 goes on.
	res := replay(t, job, "j1a1w1 > j1a2w2@1:0 order 1,1,2,2,1,1,2,2")
	sc := res.Scenarios[0]
	assert.Equal(t, result.Idempotent, sc.Verdict)
	assert.Equal(t, 1, sc.LockWaits)
	assert.Equal(t, []int{1, 1, 2, 2, 1, 1, 2, 2}, sc.Order)
}

// Opposite lock orders deadlock; the server aborts one delivery as the
// handler would see it, and the other completes the job.
func TestConcurrentDeliveryDeadlock(t *testing.T) {
	job := harness.Job{Name: "deadlock", Handler: func(ctx context.Context, d *harness.Delivery) error {
		first, second := 1, 2
		if d.Attempt == 2 {
			first, second = 2, 1
		}
		return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
			for _, id := range []int{first, second} {
				if _, err := tx.Exec(ctx, `UPDATE items SET note = 'set' WHERE id = $1`, id); err != nil {
					return err
				}
			}
			return nil
		})
	}}
	res := replay(t, job, "j1a1w1 > j1a2w2@1:0 order 1,1,2,2,1,2")
	sc := res.Scenarios[0]
	assert.Equal(t, result.Idempotent, sc.Verdict, "%+v", sc)
	var deadlocked int
	for _, d := range sc.Deliveries {
		if d.Err != "" {
			assert.Contains(t, d.Err, "40P01")
			deadlocked++
		}
	}
	assert.Equal(t, 1, deadlocked, "the server aborted exactly one side")
	assert.Equal(t, 2, sc.LockWaits)
}

// A hung handler fails its delivery after the deadline, naming its step.
func TestHungHandler(t *testing.T) {
	job := harness.Job{Name: "sleeper", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if d.Attempt == 1 {
			return nil
		}
		_, err := d.DB.Exec(ctx, `SELECT pg_sleep(600)`)
		return err
	}}
	res := replay(t, job, "j1a1w1 > j1a2w2", func(c *harness.Config) { c.DeliveryTimeout = 2 * time.Second })
	sc := res.Scenarios[0]
	assert.Equal(t, result.NotIdempotent, sc.Verdict)
	assert.Equal(t, "handler did not return within 2s (Config.DeliveryTimeout); it was at step 1, which reached the server and had not finished: SELECT pg_sleep(600)", sc.Deliveries[1].Err)
}

// A handler that hangs in its own code after a finished step is reported
// after that step, not at a next step that never reached the server.
func TestHungHandlerBetweenSteps(t *testing.T) {
	job := harness.Job{Name: "dawdler", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if _, err := d.DB.Exec(ctx, `UPDATE items SET note = 'seen' WHERE id = 1`); err != nil {
			return err
		}
		if d.Attempt == 1 {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Minute):
		}
		return ctx.Err()
	}}
	res := replay(t, job, "j1a1w1 > j1a2w2", func(c *harness.Config) { c.DeliveryTimeout = 2 * time.Second })
	sc := res.Scenarios[0]
	assert.Equal(t, "handler did not return within 2s (Config.DeliveryTimeout); it was in its own code after step 1 finished "+
		"(UPDATE items SET note = 'seen' WHERE id = 1), before step 2 reached the server", sc.Deliveries[1].Err)
}

// A dead delivery's goroutine that keeps going cannot write anything.
func TestDeadDeliveryCannotWrite(t *testing.T) {
	finished := make(chan struct{})
	closeFinished := sync.OnceFunc(func() { close(finished) })
	var refused atomic.Int32
	job := harness.Job{Name: "stubborn", Handler: func(ctx context.Context, d *harness.Delivery) error {
		for i := range 10 {
			_, err := d.DB.Exec(context.WithoutCancel(ctx), `INSERT INTO log VALUES ($1, $2)`, d.Attempt, fmt.Sprint(i))
			if err != nil && d.Attempt == 1 {
				refused.Add(1)
			}
		}
		if d.Attempt == 1 && refused.Load() > 0 {
			closeFinished()
		}
		return nil
	}}
	res := replay(t, job, "j1a1w1!crash:3 > +30s j1a2w2")
	<-finished // the dead delivery tried all its inserts
	got := rows(t, res.Scenarios[0])
	assert.Equal(t, []string{"1:0", "1:1", "2:0", "2:1", "2:2", "2:3", "2:4", "2:5", "2:6", "2:7", "2:8", "2:9"}, got)
	assert.Equal(t, int32(8+8), refused.Load(), "steps 3 to 10 were refused, in the failing scenario and in its confirming rerun")
}

func TestHandlerPanicIsAFinding(t *testing.T) {
	job := harness.Job{Name: "panics", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if d.Attempt > 1 {
			panic(errors.New("nil map"))
		}
		return nil
	}}
	sc := replay(t, job, "j1a1w1 > j1a2w2").Scenarios[0]
	assert.Equal(t, result.NotIdempotent, sc.Verdict)
	assert.Contains(t, sc.Deliveries[1].Err, "handler panicked: nil map")
}

// fates are the fates of o's steps, in order.
func fates(o result.DeliveryOutcome) []result.Fate {
	var out []result.Fate
	for _, s := range o.Steps {
		out = append(out, s.Fate)
	}
	return out
}
