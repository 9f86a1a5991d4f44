package twiceasynq

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With no TWICE_REDIS_URL and no redis-server on PATH, the error names
// the three ways to give the adapter a Redis.
func TestNoRedisNamesTheWays(t *testing.T) {
	t.Setenv(RedisURLEnv, "")
	t.Setenv("PATH", t.TempDir())
	_, err := findRedis(t.Context())
	require.ErrorIs(t, err, errNoRedis)
	for _, way := range []string{"TWICE_REDIS_URL", "redis-server", "docker run"} {
		assert.Contains(t, err.Error(), way)
	}
}

// TWICE_REDIS_URL is used as given: here the throwaway server's socket,
// whose databases the adapter counts.
func TestRedisURL(t *testing.T) {
	local, err := theRedis(t.Context())
	require.NoError(t, err)
	t.Setenv(RedisURLEnv, "unix://"+local.opts.Addr)
	s, err := findRedis(t.Context())
	require.NoError(t, err)
	assert.Equal(t, redisDatabases, s.databases)
	assert.Equal(t, "unix", s.opts.Network)

	t.Setenv(RedisURLEnv, "http://nowhere")
	_, err = findRedis(t.Context())
	assert.ErrorContains(t, err, "is not a Redis URL")
}

func (s *redisServer) freeCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.free)
}

// Every scenario's Redis database is given back once its execution is
// over, so a test binary running many checks never runs out of them.
func TestScenariosGiveTheirDatabaseBack(t *testing.T) {
	rs, err := theRedis(t.Context())
	require.NoError(t, err)
	before := rs.freeCount()
	job := Job("touch", asynq.NewTask("touch", nil), func(d *harness.Delivery) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			_, err := d.DB.Exec(ctx, `UPDATE t SET v = 1`)
			return err
		})
	})
	res, err := harness.Run(t.Context(), job, harness.Config{Setup: []harness.Setup{harness.SQL(`CREATE TABLE t (v int); INSERT INTO t VALUES (0)`)}, Faults: []faults.Fault{faults.RunTwice(), faults.CrashBeforeAck(), faults.ProducerRetry()}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	require.True(t, res.Idempotent(), "%s", res)
	deadline := time.Now().Add(20 * time.Second)
	for rs.freeCount() != before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	assert.Equal(t, before, rs.freeCount(), "the scenarios' databases are free again")
}
