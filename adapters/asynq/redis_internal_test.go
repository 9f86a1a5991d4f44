package twiceasynq

import (
	"testing"

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
