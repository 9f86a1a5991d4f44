package twiceasynq

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// freshDB is a flushed database of the test binary's Redis, given back at
// the end.
func freshDB(t *testing.T) *redis.Client {
	t.Helper()
	rs, err := theRedis(t.Context())
	require.NoError(t, err)
	db, err := rs.take()
	require.NoError(t, err)
	c := rs.client(db)
	require.NoError(t, c.FlushDB(t.Context()).Err())
	t.Cleanup(func() {
		_ = c.FlushDB(context.Background()).Err()
		_ = c.Close()
		rs.give(db)
	})
	return c
}

// waitState waits (bounded) until asynq holds the task in state want.
func waitState(t *testing.T, insp *asynq.Inspector, qname, id string, want asynq.TaskState) *asynq.TaskInfo {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := insp.GetTaskInfo(qname, id)
		require.NoError(t, err)
		if info.State == want || time.Now().After(deadline) {
			return info
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The adapter moves a due scheduled task to pending with Inspector.RunTask
// instead of waiting for asynq's forwarder: both leave the same task
// (pending, same retry count, payload and options).
func TestConformanceRunTaskIsTheForwardersMove(t *testing.T) {
	viaForwarder := func() *asynq.TaskInfo {
		c := freshDB(t)
		_, err := asynq.NewClientFromRedisClient(c).Enqueue(asynq.NewTask("t", []byte("p")), asynq.TaskID("x"), asynq.ProcessIn(time.Second), asynq.MaxRetry(3))
		require.NoError(t, err)
		srv := asynq.NewServerFromRedisClient(c, asynq.Config{Queues: map[string]int{"default": 1}, DelayedTaskCheckInterval: 50 * time.Millisecond,
			Logger: quiet{}, LogLevel: asynq.FatalLevel})
		// No handler may take it: the server is only its forwarder, so
		// the queue is paused for its processor.
		insp := asynq.NewInspectorFromRedisClient(c)
		require.NoError(t, insp.PauseQueue("default"))
		require.NoError(t, srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return errors.New("unreachable") })))
		defer srv.Shutdown()
		return waitState(t, insp, "default", "x", asynq.TaskStatePending)
	}
	viaRunTask := func() *asynq.TaskInfo {
		c := freshDB(t)
		_, err := asynq.NewClientFromRedisClient(c).Enqueue(asynq.NewTask("t", []byte("p")), asynq.TaskID("x"), asynq.ProcessIn(time.Hour), asynq.MaxRetry(3))
		require.NoError(t, err)
		insp := asynq.NewInspectorFromRedisClient(c)
		require.NoError(t, insp.RunTask("default", "x"))
		return waitState(t, insp, "default", "x", asynq.TaskStatePending)
	}
	f, r := viaForwarder(), viaRunTask()
	require.Equal(t, asynq.TaskStatePending, f.State, "asynq's forwarder moved the due task")
	for _, i := range []*asynq.TaskInfo{f, r} {
		i.NextProcessAt = time.Time{} // when it became pending: wall time
	}
	assert.Equal(t, f, r)
}

// The adapter ends a Unique lock on the harness clock by deleting it;
// asynq's client then accepts the copy exactly as after Redis expired the
// lock's TTL.
func TestConformanceUniqueExpiry(t *testing.T) {
	enqueueTwice := func(expire func(c *redis.Client)) error {
		c := freshDB(t)
		cl := asynq.NewClientFromRedisClient(c)
		_, err := cl.Enqueue(asynq.NewTask("t", []byte("p")), asynq.Unique(time.Second))
		require.NoError(t, err)
		_, err = cl.Enqueue(asynq.NewTask("t", []byte("p")), asynq.Unique(time.Second))
		require.ErrorIs(t, err, asynq.ErrDuplicateTask, "the lock holds")
		expire(c)
		_, err = cl.Enqueue(asynq.NewTask("t", []byte("p")), asynq.Unique(time.Second))
		return err
	}
	byTTL := enqueueTwice(func(c *redis.Client) {
		key := uniqueKey("default", "t", []byte("p"))
		for c.Exists(t.Context(), key).Val() == 1 {
			time.Sleep(20 * time.Millisecond)
		}
	})
	byAdapter := enqueueTwice(func(c *redis.Client) {
		require.Equal(t, int64(1), c.Del(t.Context(), uniqueKey("default", "t", []byte("p"))).Val(), "the adapter's key is asynq's")
	})
	assert.NoError(t, byTTL)
	assert.NoError(t, byAdapter)
}

// The adapter ends a completed TaskID task's Retention on the harness
// clock by deleting what asynq's janitor deletes on the wall clock: in
// both, the task is gone from Redis (its hash and its place in the
// completed set), the same keys are left, and asynq's client accepts a
// new task with that ID.
func TestConformanceRetentionExpiry(t *testing.T) {
	completeThenExpire := func(janitor time.Duration, expire func(c *redis.Client)) ([]string, error) {
		c := freshDB(t)
		cl := asynq.NewClientFromRedisClient(c)
		_, err := cl.Enqueue(asynq.NewTask("t", []byte("p")), asynq.TaskID("x"), asynq.Retention(time.Second))
		require.NoError(t, err)
		srv := asynq.NewServerFromRedisClient(c, asynq.Config{Queues: map[string]int{"default": 1}, JanitorInterval: janitor,
			Logger: quiet{}, LogLevel: asynq.FatalLevel})
		require.NoError(t, srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })))
		insp := asynq.NewInspectorFromRedisClient(c)
		require.Equal(t, asynq.TaskStateCompleted, waitState(t, insp, "default", "x", asynq.TaskStateCompleted).State)
		_, err = cl.Enqueue(asynq.NewTask("t", []byte("p")), asynq.TaskID("x"))
		require.ErrorIs(t, err, asynq.ErrTaskIDConflict, "retained, the ID is taken")
		expire(c)
		srv.Shutdown()
		keys, err := c.Keys(t.Context(), "asynq:{default}:*").Result()
		require.NoError(t, err)
		slices.Sort(keys)
		_, err = cl.Enqueue(asynq.NewTask("t", []byte("p")), asynq.TaskID("x"))
		return keys, err
	}
	byJanitor, errJanitor := completeThenExpire(100*time.Millisecond, func(c *redis.Client) {
		deadline := time.Now().Add(20 * time.Second)
		for c.Exists(t.Context(), "asynq:{default}:t:x").Val() == 1 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	})
	byAdapter, errAdapter := completeThenExpire(24*time.Hour, func(c *redis.Client) {
		s := &scenario{rdb: c, tasks: map[string]*taskState{"x": {queue: "default", retainedUntil: time.Unix(1, 0)}}}
		require.NoError(t, s.expireRetained(t.Context(), time.Unix(1, 0)))
	})
	require.NoError(t, errJanitor, "asynq's janitor freed the ID")
	assert.NoError(t, errAdapter, "the adapter freed the ID")
	assert.Equal(t, byJanitor, byAdapter, "the keys the janitor and the adapter leave")
}

// A worker cut off Redis leaves its task active; once its lease is
// rewound, a fresh server's recoverer (it runs at start) moves it to
// retry as a failure with ErrLeaseExpired, retry count 1: what asynq does
// a minute after a worker died.
func TestConformanceRecovererTakesACutWorkersTask(t *testing.T) {
	c := freshDB(t)
	rs, err := theRedis(t.Context())
	require.NoError(t, err)
	s := &scenario{q: &asynqQueue{msg: message{queue: "default"}, opts: options{retryDelay: defaultRetryDelay}},
		redis: rs, db: c.Options().DB, rdb: c, insp: asynq.NewInspectorFromRedisClient(c),
		changed: make(chan struct{}), tasks: map[string]*taskState{}, taken: map[string]*delivery{}}
	_, err = asynq.NewClientFromRedisClient(c).Enqueue(asynq.NewTask("t", nil), asynq.TaskID("x"))
	require.NoError(t, err)
	d, err := s.awaitTaken(t.Context(), "x")
	require.NoError(t, err)
	d.info = waitState(t, s.insp, "default", "x", asynq.TaskStateActive)
	require.NoError(t, s.recoverTask(t.Context(), d, &taskState{queue: "default"}))
	info := waitState(t, s.insp, "default", "x", asynq.TaskStateRetry)
	assert.Equal(t, asynq.TaskStateRetry, info.State)
	assert.Equal(t, 1, info.Retried)
	assert.Equal(t, asynq.ErrLeaseExpired.Error(), info.LastErr)
	for _, w := range s.workers {
		w.stop()
	}
}
