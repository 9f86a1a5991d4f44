package twiceriver_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twiceriver "github.com/runtwice/twice/adapters/river"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
)

// The conformance tests run the same jobs through River's real client
// (its producer, executor, completer and rescuer, on a database of its
// own) and through the adapter's queue, and require the same job states.
// What the adapter still models is exactly what they cover: the hand-out
// (Fetch), the executor's reading of Work's result (Ack, Nack) and the
// rescuer's decision.

// confArgs is a job whose worker does what Do says; its Timeout is 30m.
type confArgs struct {
	Do string `json:"do"`
}

func (confArgs) Kind() string { return "twice_conformance" }

type confWorker struct {
	river.WorkerDefaults[confArgs]
}

func (confWorker) Timeout(*river.Job[confArgs]) time.Duration { return 30 * time.Minute }

func (confWorker) Work(_ context.Context, job *river.Job[confArgs]) error {
	switch job.Args.Do {
	case "fail":
		return errors.New("failed on purpose")
	case "snooze":
		return river.JobSnooze(5 * time.Minute)
	case "cancel":
		return river.JobCancel(errors.New("given up on purpose"))
	}
	return nil
}

// foreverArgs is a job whose worker has no timeout.
type foreverArgs struct{}

func (foreverArgs) Kind() string { return "twice_conformance_forever" }

type foreverWorker struct {
	river.WorkerDefaults[foreverArgs]
}

func (foreverWorker) Timeout(*river.Job[foreverArgs]) time.Duration { return -1 }

func (foreverWorker) Work(context.Context, *river.Job[foreverArgs]) error { return nil }

func confWorkers() *river.Workers {
	w := river.NewWorkers()
	river.AddWorker(w, confWorker{})
	river.AddWorker(w, foreverWorker{})
	return w
}

func confQueue(do string) queue.Queue {
	return twiceriver.Job("conformance-"+do, confArgs{Do: do},
		func(*harness.Delivery) river.Worker[confArgs] { return confWorker{} }).Queue
}

// jobState is what the tests compare of a job row.
type jobState struct {
	State   rivertype.JobState
	Attempt int
	Errors  int
	Snoozes float64
	Rescues float64
}

func stateOf(row *rivertype.JobRow) jobState {
	var meta map[string]any
	_ = json.Unmarshal(row.Metadata, &meta)
	num := func(k string) float64 { f, _ := meta[k].(float64); return f }
	return jobState{State: row.State, Attempt: row.Attempt, Errors: len(row.Errors), Snoozes: num("snoozes"), Rescues: num("river:rescue_count")}
}

var quietLog = slog.New(slog.DiscardHandler)

func mustBegin(t *testing.T, conn *pgx.Conn) pgx.Tx {
	t.Helper()
	tx, err := conn.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

func realClient(t *testing.T, conn *pgx.Conn, queues map[string]river.QueueConfig) (*river.Client[pgx.Tx], *pgxpool.Pool) {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), conn.Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger: quietLog, Queues: queues, Workers: confWorkers(), RescueStuckJobsAfter: time.Hour,
		FetchPollInterval: 50 * time.Millisecond, FetchCooldown: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	return c, pool
}

func waitFor(t *testing.T, pool *pgxpool.Pool, id int64, done func(*rivertype.JobRow) bool) *rivertype.JobRow {
	t.Helper()
	exec := riverpgxv5.New(pool).GetExecutor()
	deadline := time.Now().Add(90 * time.Second)
	for {
		row, err := exec.JobGetByID(t.Context(), &riverdriver.JobGetByIDParams{ID: id})
		require.NoError(t, err)
		if done(row) {
			return row
		}
		if time.Now().After(deadline) {
			require.FailNow(t, "River's client never moved the job on", "job %d is %s (attempt %d)", id, row.State, row.Attempt)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// River's executor and completer, and the adapter's Fetch with Ack or
// Nack, leave a job that completes, fails, snoozes or cancels in the same
// state, attempt, errors and metadata, due at the same delay (River's
// retry jitter is 10%).
func TestConformanceExecutor(t *testing.T) {
	for _, do := range []string{"ok", "fail", "snooze", "cancel"} {
		t.Run(do, func(t *testing.T) {
			// River's own client works the job.
			realConn := riverDB(t, confQueue(do))
			c, _ := realClient(t, realConn, map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}})
			res, err := c.Insert(t.Context(), confArgs{Do: do}, nil)
			require.NoError(t, err)
			// The row as River's completer left it after the first
			// attempt, before River retries a failed job.
			events, unsubscribe := c.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobSnoozed, river.EventKindJobCancelled)
			defer unsubscribe()
			require.NoError(t, c.Start(t.Context()))
			var real *rivertype.JobRow
			select {
			case ev := <-events:
				real = ev.Job
			case <-time.After(90 * time.Second):
				require.FailNow(t, "River's client never worked the job")
			}
			stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.NoError(t, c.Stop(stopCtx))

			// The adapter's queue does the same.
			q := confQueue(do)
			conn := riverDB(t, q)
			now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
			enq, err := q.Enqueue(t.Context(), queue.Op{Conn: conn, Now: now, Job: 1})
			require.NoError(t, err)
			op := queue.Op{Conn: conn, Now: now, Job: 1, JobID: enq.JobID, Kind: queue.DeliveryFirst}
			f, err := q.Fetch(t.Context(), op)
			require.NoError(t, err)
			require.True(t, f.Delivered, f.Reason)
			op.Queued = f.Job
			if werr := (confWorker{}).Work(t.Context(), &river.Job[confArgs]{JobRow: f.Job.(*rivertype.JobRow), Args: confArgs{Do: do}}); werr != nil {
				_, err = q.Nack(t.Context(), op, werr)
			} else {
				_, err = q.Ack(t.Context(), op)
			}
			require.NoError(t, err)
			model, err := riverpgxv5.New(nil).UnwrapExecutor(mustBegin(t, conn)).JobGetByID(t.Context(), &riverdriver.JobGetByIDParams{ID: res.Job.ID})
			require.NoError(t, err)

			assert.Equal(t, stateOf(real), stateOf(model), "River's client left %s, the adapter %s", real.State, model.State)
			if real.State == rivertype.JobStateRetryable || real.State == rivertype.JobStateScheduled {
				realDelay := real.ScheduledAt.Sub(*real.AttemptedAt)
				modelDelay := model.ScheduledAt.Sub(now)
				assert.InDelta(t, modelDelay.Seconds(), realDelay.Seconds(), math.Max(0.1*modelDelay.Seconds(), 0.5),
					"due %v after the attempt in River, %v in the adapter", realDelay, modelDelay)
			}
		})
	}
}

// River's real rescuer and the adapter's rescue agree on stuck jobs: a
// job whose attempt started 2h ago is rescued (its 30m timeout and the
// 1h rescue both passed); one that started 45m ago is left alone (its
// timeout passed, the rescue not); one with no timeout is never rescued.
func TestConformanceRescuer(t *testing.T) {
	type stuck struct {
		args  river.JobArgs
		queue queue.Queue
		ago   time.Duration
	}
	forever := twiceriver.Job("conformance-forever", foreverArgs{},
		func(*harness.Delivery) river.Worker[foreverArgs] { return foreverWorker{} }).Queue
	jobs := []stuck{
		{confArgs{Do: "ok"}, confQueue("ok"), 2 * time.Hour},
		{confArgs{Do: "fail"}, confQueue("fail"), 45 * time.Minute},
		{foreverArgs{}, forever, 2 * time.Hour},
	}
	// Both databases get the jobs running, their attempts started ago.
	setup := func(conn *pgx.Conn, now time.Time) []int64 {
		var ids []int64
		for _, j := range jobs {
			enq, err := j.queue.Enqueue(t.Context(), queue.Op{Conn: conn, Now: now.Add(-j.ago), Job: 1})
			require.NoError(t, err)
			f, err := j.queue.Fetch(t.Context(), queue.Op{Conn: conn, Now: now.Add(-j.ago), Job: 1, JobID: enq.JobID, Kind: queue.DeliveryFirst})
			require.NoError(t, err)
			require.True(t, f.Delivered, f.Reason)
			ids = append(ids, f.Job.(*rivertype.JobRow).ID)
		}
		// Out of every queue the real client works, so only its rescuer
		// touches them.
		_, err := conn.Exec(t.Context(), `UPDATE river_job SET queue = 'stuck'`)
		require.NoError(t, err)
		return ids
	}

	realConn := riverDB(t, forever)
	ids := setup(realConn, time.Now().UTC())
	c, pool := realClient(t, realConn, map[string]river.QueueConfig{"elsewhere": {MaxWorkers: 1}})
	require.NoError(t, c.Start(t.Context()))
	// The rescuer handles every stuck job in one pass: once the first is
	// rescued, the others have been decided.
	waitFor(t, pool, ids[0], func(r *rivertype.JobRow) bool { return r.State != rivertype.JobStateRunning })
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(stopCtx))

	conn := riverDB(t, forever)
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	setup(conn, now)
	for i, j := range jobs {
		f, err := j.queue.Fetch(t.Context(), queue.Op{Conn: conn, Now: now, Job: 1, JobID: strconv.FormatInt(ids[i], 10), Kind: queue.DeliveryRedelivery})
		require.NoError(t, err)
		_ = f
	}
	tx := mustBegin(t, conn)
	for i, id := range ids {
		real := stateOf(waitFor(t, pool, id, func(*rivertype.JobRow) bool { return true }))
		if real.State == rivertype.JobStateAvailable {
			real.State = rivertype.JobStateRetryable // River's scheduler made the rescued job available
		}
		model, err := riverpgxv5.New(nil).UnwrapExecutor(tx).JobGetByID(t.Context(), &riverdriver.JobGetByIDParams{ID: id})
		require.NoError(t, err)
		// The adapter's Fetch hands a rescued job out when it is due;
		// compare the state before that hand-out.
		got := stateOf(model)
		if model.State == rivertype.JobStateRunning && model.Attempt == 2 {
			got.State, got.Attempt = rivertype.JobStateRetryable, 1
		}
		assert.Equal(t, real, got, "job %d (%s, started %v ago)", id, jobs[i].args.Kind(), jobs[i].ago)
	}
	assert.Contains(t, []rivertype.JobState{rivertype.JobStateRetryable, rivertype.JobStateAvailable}, waitFor(t, pool, ids[0], func(*rivertype.JobRow) bool { return true }).State)
	assert.Equal(t, rivertype.JobStateRunning, waitFor(t, pool, ids[1], func(*rivertype.JobRow) bool { return true }).State)
	assert.Equal(t, rivertype.JobStateRunning, waitFor(t, pool, ids[2], func(*rivertype.JobRow) bool { return true }).State)
}
