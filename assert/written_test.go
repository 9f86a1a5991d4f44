package assert_test

import (
	"context"
	"regexp"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/internal/freshdb"
	"github.com/runtwice/twice/internal/pgserver"
)

// partialFixture has a keyed table of many types, one without a key and
// one whose key is two columns.
const partialFixture = `
CREATE TABLE orders (id int PRIMARY KEY, n int, note text, at timestamptz, doc jsonb, f float8, raw bytea,
	tags text[], amount numeric(12,2), due date, span interval, stamp timestamp);
INSERT INTO orders SELECT i, i % 7, 'order ' || i, '2024-01-01 00:00:00+00'::timestamptz + i * interval '1 minute',
	jsonb_build_object('i', i, 'nested', jsonb_build_array(i, 'x')), i / 3.0, decode(lpad(to_hex(i), 4, '0'), 'hex'),
	ARRAY['t' || i, NULL], i * 1.25, '2024-02-29'::date + i, i * interval '1 second', '2024-01-01 12:00:00'::timestamp
	FROM generate_series(1, 300) i;
CREATE TABLE lines (order_id int, line int, qty int, PRIMARY KEY (order_id, line));
INSERT INTO lines SELECT i, j, i * j FROM generate_series(1, 50) i, generate_series(1, 3) j;
CREATE TABLE notes (body text);
INSERT INTO notes VALUES ('a'), ('b');`

// twoCopies prepares the fixture as a template (with the write history:
// the local server's user is a superuser) and hands out two copies of it.
func twoCopies(t *testing.T) [2]*freshdb.Database {
	t.Helper()
	ctx := context.Background()
	srv, err := pgserver.Shared(ctx)
	require.NoError(t, err)
	tmpl, err := freshdb.Prepare(ctx, srv, []freshdb.Step{{Name: t.Name(), SQL: partialFixture}})
	require.NoError(t, err)
	var dbs [2]*freshdb.Database
	for i := range dbs {
		dbs[i], err = tmpl.Fresh(ctx)
		require.NoError(t, err)
		d := dbs[i]
		t.Cleanup(func() { _ = d.Drop(context.Background()) })
	}
	if dbs[0].KeptConn() == nil || tmpl.UndoFrom() == 0 {
		t.Skip("the template has no write history: the server's user is not a superuser")
	}
	return dbs
}

// snapshots takes db's snapshot in part (through the write history) and
// whole.
func snapshots(t *testing.T, s *assert.Snapshotter, db *freshdb.Database) (part, whole *assert.Snapshot) {
	t.Helper()
	ctx := context.Background()
	ch, err := db.Changed(ctx)
	require.NoError(t, err)
	require.True(t, ch.Known)
	part, err = s.TakeChanged(ctx, db.KeptConn(), func(schema, table string) bool {
		return ch.Tables[freshdb.TableID{Schema: schema, Name: table}]
	})
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, db.ConnString)
	require.NoError(t, err)
	defer conn.Close(ctx)
	whole, err = assert.TakeSnapshot(ctx, conn)
	require.NoError(t, err)
	return part, whole
}

func run(t *testing.T, db *freshdb.Database, sql string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), db.ConnString)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), sql)
	require.NoError(t, err)
}

// A table read in part compares as the same table read whole: the rows
// neither side wrote are the template's on both, and each side's rows
// under a key only the other wrote are the template's, read back from the
// history's old images through every type's JSON form.
func TestPartialReadComparesAsWhole(t *testing.T) {
	for _, tc := range []struct {
		name, clean, scenario string
	}{
		{"same writes", `UPDATE orders SET n = n + 1 WHERE id <= 20`, `UPDATE orders SET n = n + 1 WHERE id <= 20`},
		{"one more increment", `UPDATE orders SET n = n + 1 WHERE id <= 20`, `UPDATE orders SET n = n + 1 WHERE id <= 20; UPDATE orders SET n = n + 1 WHERE id = 7`},
		{"rows only the scenario wrote", `UPDATE orders SET note = 'paid' WHERE id = 1`,
			`UPDATE orders SET note = 'paid' WHERE id = 1; UPDATE orders SET at = now(), doc = '{}', f = 0.1, raw = '\x00', tags = '{}', amount = 0, due = NULL, span = '1 day', stamp = now() WHERE id BETWEEN 100 AND 110; DELETE FROM orders WHERE id = 299`},
		{"rows only the clean run wrote", `UPDATE orders SET doc = doc || '{"paid": true}' WHERE id IN (5, 6); DELETE FROM lines WHERE order_id = 3`,
			`UPDATE lines SET qty = 0 WHERE order_id = 4 AND line = 2`},
		{"an insert and a key moved", `INSERT INTO orders (id, n) VALUES (1000, 1)`, `INSERT INTO orders (id, n) VALUES (1001, 1); UPDATE orders SET id = 2000 WHERE id = 8; INSERT INTO lines VALUES (99, 1, 1)`},
		{"a row deleted and inserted again", `UPDATE notes SET body = 'c'`, `DELETE FROM orders WHERE id = 9; INSERT INTO orders (id, n, note) VALUES (9, 2, 'order 9')`},
		{"a truncate", `UPDATE orders SET n = 0 WHERE id = 1`, `TRUNCATE lines; DELETE FROM orders WHERE id > 290`},
		{"a truncate on both sides", `TRUNCATE orders CASCADE; INSERT INTO orders (id) VALUES (1)`, `TRUNCATE orders CASCADE; INSERT INTO orders (id) VALUES (2)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dbs := twoCopies(t)
			run(t, dbs[0], tc.clean)
			run(t, dbs[1], tc.scenario)
			s := &assert.Snapshotter{PartialFrom: 1}
			partClean, wholeClean := snapshots(t, s, dbs[0])
			partScen, wholeScen := snapshots(t, s, dbs[1])

			orders := table(t, partScen, "orders")
			require.NotNil(t, orders.Written, "orders read in part")
			require.Less(t, len(orders.Rows), 300, "orders read whole")
			require.Nil(t, table(t, partScen, "notes").Written, "a table without a key is read whole")

			want, err := assert.DiffState(wholeClean, wholeScen, assert.Options{})
			require.NoError(t, err)
			got, err := assert.DiffState(partClean, partScen, assert.Options{})
			require.NoError(t, err)
			// The whole read counts the rows neither side wrote as
			// identical; the partial one never reads them.
			require.Equal(t, withoutIdentical(want), withoutIdentical(got))
			require.Equal(t, assert.VolatileColumns(wholeClean, wholeScen), assert.VolatileColumns(partClean, partScen))
		})
	}
}

var identicalRows = regexp.MustCompile(`(?m)^\s*\.\.\. // \d+ identical rows?\n`)

// withoutIdentical is diffs without go-cmp's count of identical rows.
func withoutIdentical(diffs []assert.TableDiff) []assert.TableDiff {
	out := make([]assert.TableDiff, len(diffs))
	for i, d := range diffs {
		d.Diff = identicalRows.ReplaceAllString(d.Diff, "")
		out[i] = d
	}
	return out
}
