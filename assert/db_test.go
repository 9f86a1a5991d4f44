package assert_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/internal/freshdb"
	"github.com/runtwice/twice/internal/pgserver"
)

// newDB hands out a fresh database of our own on the shared server, with
// the schema SQL applied, and gives it back when the test ends.
func newDB(t testing.TB, schema string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	srv, err := pgserver.Shared(ctx)
	require.NoError(t, err)
	tmpl, err := freshdb.Prepare(ctx, srv, []freshdb.Step{{Name: "SQL", SQL: schema}})
	require.NoError(t, err)
	db, err := tmpl.Fresh(ctx)
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := db.Drop(context.Background()); err != nil {
			t.Errorf("giving back %s: %v", db.Name, err)
		}
	})
	conn, err := pgx.Connect(ctx, db.ConnString)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
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
