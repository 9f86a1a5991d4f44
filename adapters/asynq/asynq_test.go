package twiceasynq_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twiceasynq "github.com/runtwice/twice/adapters/asynq"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

type setArgs struct {
	Account int64 `json:"account"`
}

// setPoints sets the account's points: idempotent under every fault.
func setPoints(pool *pgxpool.Pool) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		var args setArgs
		if err := json.Unmarshal(task.Payload(), &args); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, `UPDATE accounts SET points = 50 WHERE id = $1`, args.Account)
		return err
	})
}

// The config names only the job's own table: the adapter's come with the
// job.
var accounts = harness.Config{
	Setup:  []harness.Setup{harness.SQL(`CREATE TABLE accounts (id bigint PRIMARY KEY, points int NOT NULL); INSERT INTO accounts VALUES (7, 0)`)},
	Faults: []faults.Fault{faults.RunTwice(), faults.ProducerRetry(), faults.CrashBeforeAck(), faults.CrashAtEveryStep()},
}

type signup struct {
	User        string    `json:"user"`
	RequestedAt time.Time `json:"requested_at"`
}

// grant inserts a row per delivery: not idempotent on its own.
func grant(pool *pgxpool.Pool) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		var s signup
		if err := json.Unmarshal(task.Payload(), &s); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, `INSERT INTO grants (username) VALUES ($1)`, s.User)
		return err
	})
}

func signupTask(t *testing.T, at time.Time) *asynq.Task {
	b, err := json.Marshal(signup{User: "alice", RequestedAt: at})
	require.NoError(t, err)
	return asynq.NewTask("grant:signup", b, asynq.Unique(time.Hour))
}

// asynq's Unique dedups on the payload's checksum, so a producer that
// stamps each call with its time defeats it: with Copies building the
// copy's task per enqueue, the producer's second call is enqueued and
// the grant is given twice. Byte-identical copies are refused.
func TestCopiesBuiltPerEnqueueDefeatUnique(t *testing.T) {
	grants := harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE grants (id bigserial PRIMARY KEY, username text NOT NULL)`)},
		Faults: []faults.Fault{faults.ProducerRetry()},
	}
	start := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	newHandler := func(d *harness.Delivery) asynq.Handler { return grant(d.DB) }

	same := twiceasynq.Job("grant", signupTask(t, start), newHandler)
	assert.Equal(t, time.Hour, same.Queue.Rules().Dedup, "Unique's TTL is the queue's dedup window")
	res, err := harness.Run(t.Context(), same, grants)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	require.Len(t, res.Scenarios, 1)
	assert.True(t, res.Idempotent(), "asynq refuses the byte-identical copy: %s", res)
	assert.Contains(t, res.Scenarios[0].Deliveries[1].NotDelivered, asynq.ErrDuplicateTask.Error())

	stamped := twiceasynq.Job("grant", signupTask(t, start), newHandler,
		twiceasynq.Copies(func(n int, now time.Time) *asynq.Task {
			return signupTask(t, now.Add(time.Duration(n)*time.Millisecond))
		}))
	res, err = harness.Run(t.Context(), stamped, grants)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	require.Len(t, res.Scenarios, 1)
	assert.False(t, res.Idempotent(), "the stamped copy passes Unique and grants twice: %s", res)
	assert.Empty(t, res.Scenarios[0].Deliveries[1].NotDelivered)
}

// A TaskID's task refuses copies for as long as it is held.
func TestTaskIDDedupsWhileHeld(t *testing.T) {
	j := twiceasynq.Job("grant", signupTask(t, time.Time{}), func(d *harness.Delivery) asynq.Handler { return grant(d.DB) },
		twiceasynq.Enqueue(asynq.TaskID("grant-alice")))
	assert.Equal(t, time.Hour, j.Queue.Rules().Dedup, "Unique wins over TaskID for the window")
	j = twiceasynq.Job("grant", asynq.NewTask("grant:signup", nil, asynq.TaskID("grant-alice")), func(d *harness.Delivery) asynq.Handler { return grant(d.DB) })
	assert.Negative(t, j.Queue.Rules().Dedup)
}

// The handler runs behind the production middleware, and the task it gets
// is the one asynq's processor dequeued: its ResultWriter writes to Redis.
func TestMiddlewareAndResultWriter(t *testing.T) {
	var mu sync.Mutex
	var wrapped, written int
	mw := func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
			mu.Lock()
			wrapped++
			mu.Unlock()
			return next.ProcessTask(ctx, task)
		})
	}
	payload, err := json.Marshal(setArgs{Account: 7})
	require.NoError(t, err)
	j := twiceasynq.Job("set-points", asynq.NewTask("points:set", payload), func(d *harness.Delivery) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
			if err := setPoints(d.DB).ProcessTask(ctx, task); err != nil {
				return err
			}
			if task.ResultWriter() == nil {
				return errors.New("no ResultWriter: the task is not asynq's processor's")
			}
			if _, err := task.ResultWriter().Write([]byte("50")); err != nil {
				return err
			}
			mu.Lock()
			written++
			mu.Unlock()
			return nil
		})
	}, twiceasynq.Middleware(mw), twiceasynq.Enqueue(asynq.Retention(time.Hour)))
	c := accounts
	c.Faults = []faults.Fault{faults.RunTwice()}
	res, err := harness.Run(t.Context(), j, c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	assert.True(t, res.Idempotent(), "%s", res)
	assert.Positive(t, written)
	assert.Equal(t, written, wrapped, "every delivery ran behind the middleware")
}

// asynq drops a task's Unique lock when the task succeeds, and deletes a
// finished TaskID task, so a producer's call that comes after the job
// completed is enqueued and run: the default matrix has that late copy
// for a queue that dedups, and it grants twice under both.
func TestLateCopyAfterCompletionIsEnqueued(t *testing.T) {
	grants := harness.Config{Setup: []harness.Setup{harness.SQL(`CREATE TABLE grants (id bigserial PRIMARY KEY, username text NOT NULL)`)}}
	newHandler := func(d *harness.Delivery) asynq.Handler { return grant(d.DB) }
	for name, job := range map[string]harness.Job{
		"Unique": twiceasynq.Job("grant", signupTask(t, time.Time{}), newHandler),
		"TaskID": twiceasynq.Job("grant", asynq.NewTask("grant:signup", []byte(`{"user":"alice"}`), asynq.TaskID("grant-alice")), newHandler),
	} {
		t.Run(name, func(t *testing.T) {
			res, err := harness.Run(t.Context(), job, grants)
			require.NoError(t, err)
			t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
			var late []result.Scenario
			for _, s := range res.Scenarios {
				if s.Fault == faults.NameLateProducerRetry {
					late = append(late, s)
				}
			}
			require.NotEmpty(t, late, "the default matrix has a late copy for a queue that dedups: %s", res)
			for _, s := range late {
				assert.Equal(t, result.NotIdempotent, s.Verdict, "%s: the late copy is enqueued and grants again", s.Schedule)
				require.Len(t, s.Deliveries, 2, "%s", s.Schedule)
				assert.Empty(t, s.Deliveries[1].NotDelivered, "%s: asynq enqueued the late copy", s.Schedule)
			}
		})
	}
}

// A TaskID task completed with Retention(90m) holds its ID until asynq's
// janitor deletes it at the end of the retention, on the harness clock:
// a copy from another producer path an hour after the original is
// refused as a duplicate, one two hours after is enqueued, and grants
// again.
func TestTaskIDRetentionEndsOnTheHarnessClock(t *testing.T) {
	grants := harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE grants (id bigserial PRIMARY KEY, username text NOT NULL)`)},
		Faults: []faults.Fault{faults.ProducerCopyAt(time.Hour), faults.ProducerCopyAt(2 * time.Hour)},
	}
	job := twiceasynq.Job("grant", asynq.NewTask("grant:signup", []byte(`{"user":"alice"}`), asynq.TaskID("grant-alice"), asynq.Retention(90*time.Minute)),
		func(d *harness.Delivery) asynq.Handler { return grant(d.DB) })
	res, err := harness.Run(t.Context(), job, grants)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	require.Len(t, res.Scenarios, 2, "%s", res)
	hour, twoHours := res.Scenarios[0], res.Scenarios[1]
	assert.Equal(t, result.Idempotent, hour.Verdict, "%s", hour.Schedule)
	require.Len(t, hour.Deliveries, 2, "%s", hour.Schedule)
	assert.Contains(t, hour.Deliveries[1].NotDelivered, asynq.ErrTaskIDConflict.Error(), "%s: retained for 90m, the ID is taken", hour.Schedule)
	assert.Equal(t, result.NotIdempotent, twoHours.Verdict, "%s: the retention ended, the copy is a new task", twoHours.Schedule)
	require.Len(t, twoHours.Deliveries, 2, "%s", twoHours.Schedule)
	assert.Empty(t, twoHours.Deliveries[1].NotDelivered, "%s", twoHours.Schedule)
}
