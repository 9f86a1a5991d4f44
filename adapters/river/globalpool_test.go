package twiceriver_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twiceriver "github.com/runtwice/twice/adapters/river"
	"github.com/runtwice/twice/adapters/river/example/points"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/internal/pgserver"
)

// TestGlobalPoolIsAnError checks the example's workers, but lives beside
// the adapter rather than in the example: it reaches the test binary's
// server through internal/pgserver, which an example, as code a user
// could copy, must not import.

// globalDB is a database that is not the scenario's, with River's schema
// and the workers' tables: the one a worker reaches through a pool of its
// own (a global pool built from DATABASE_URL at start-up).
func globalDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	srv, err := pgserver.Shared(ctx)
	require.NoError(t, err)
	admin, err := pgx.Connect(ctx, srv.ConnString(""))
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	name := fmt.Sprintf("twiceriver_global_%d_%d", os.Getpid(), time.Now().UnixNano())
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, srv.ConnString(name))
	require.NoError(t, err)
	t.Cleanup(func() {
		pool.Close()
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	require.NoError(t, err)
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, points.Schema)
	require.NoError(t, err)
	return pool
}

// A worker built from a global pool, not from the delivery, writes to a
// database that is not the scenario's. Completing its job there with
// JobCompleteTx finds no job: the check fails with a message naming the
// job, the delivery and the cause. Without JobCompleteTx nothing reaches
// the scenario's database at all: the check says the job took no step.
// Either way the other database is written, which is why it is an error
// and never a pass.
func TestGlobalPoolIsAnError(t *testing.T) {
	global := globalDB(t)
	_, err := harness.Run(context.Background(), twiceriver.Job("reward-global", points.RewardArgs{OrderID: 9812}, func(*harness.Delivery) river.Worker[points.RewardArgs] {
		return &points.RewardWorker{Pool: global}
	}), pointsConfig)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `job "reward-global" failed on its clean reference run 1`)
	assert.Contains(t, err.Error(), `twiceriver: job "reward-global", River job 1 (kind "reward_order", attempt 1, first): Work returned completing job 1: not found; but job 1 is running in the scenario's database`)
	assert.Contains(t, err.Error(), "the worker writes through a pool of its own (a global pool, a DSN from the environment), not the delivery's")

	_, err = harness.Run(context.Background(), twiceriver.Job("ledger-global", points.LedgerArgs{OrderID: 9812}, func(*harness.Delivery) river.Worker[points.LedgerArgs] {
		return &points.LedgerWorker{Pool: global}
	}), pointsConfig)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `job "ledger-global" took no step, on its clean run or in any scenario: no statement reached PostgreSQL through the Delivery's DB`)
	var lines int
	require.NoError(t, global.QueryRow(context.Background(), `SELECT count(*) FROM ledger`).Scan(&lines))
	assert.Positive(t, lines, "the ledger worker wrote to the global database")
}

var pointsConfig = harness.Config{Setup: []harness.Setup{harness.SQL(points.Schema)}}
