package assert_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/assert"
)

// serverURL is the dev server's maintenance database. TODO: take it from
// internal/pgserver.Shared once its local and Docker modes land.
func serverURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("TWICE_DATABASE_URL")
	if url == "" {
		t.Fatal("[twice] internal: these tests need PostgreSQL: set TWICE_DATABASE_URL, e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	}
	return url
}

// newDB creates a database of our own on the shared server, runs the
// schema SQL in it and drops it when the test ends.
func newDB(t testing.TB, schema string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	url := serverURL(t)
	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer admin.Close(ctx)
	buf := make([]byte, 6)
	_, _ = rand.Read(buf)
	name := "twice_asserttest_" + hex.EncodeToString(buf)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("dropping %s: %v", name, err)
			return
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping %s: %v", name, err)
		}
	})
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	cfg.Database = name
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	if schema != "" {
		_, err = conn.Exec(ctx, schema)
		require.NoError(t, err)
	}
	return conn
}

func exec(t testing.TB, conn *pgx.Conn, sql string) {
	t.Helper()
	_, err := conn.Exec(context.Background(), sql)
	require.NoError(t, err)
}

func snapshot(t testing.TB, q assert.Querier) *assert.Snapshot {
	t.Helper()
	s, err := assert.TakeSnapshot(context.Background(), q)
	require.NoError(t, err)
	return s
}

func table(t testing.TB, s *assert.Snapshot, name string) assert.Table {
	t.Helper()
	for _, tb := range s.Tables {
		if tb.Name == name {
			return tb
		}
	}
	require.Failf(t, "no such table", "snapshot has no table %q", name)
	return assert.Table{}
}
