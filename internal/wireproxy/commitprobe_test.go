package wireproxy_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/runtwice/twice/internal/wireproxy"
)

// probeSchema writes in every way a read-looking statement can: functions
// (plain and set-returning), a procedure that commits inside, a trigger,
// a view with a rule, a sequence.
const probeSchema = `
CREATE TABLE audit (item int NOT NULL);
CREATE SEQUENCE seq;
CREATE FUNCTION add_item(i int) RETURNS int LANGUAGE plpgsql AS $$
BEGIN INSERT INTO items (id) VALUES (i); RETURN i; END $$;
CREATE FUNCTION add_items(i int) RETURNS SETOF int LANGUAGE plpgsql AS $$
BEGIN INSERT INTO items (id) VALUES (i); RETURN NEXT i; END $$;
CREATE FUNCTION item_count() RETURNS int LANGUAGE sql STABLE AS $$ SELECT count(*)::int FROM items $$;
CREATE PROCEDURE add_item_proc(i int) LANGUAGE plpgsql AS $$
BEGIN INSERT INTO items (id) VALUES (i); END $$;
CREATE PROCEDURE add_item_commit(i int) LANGUAGE plpgsql AS $$
BEGIN INSERT INTO items (id) VALUES (i); COMMIT; END $$;
CREATE FUNCTION audit_item() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO audit VALUES (NEW.id); RETURN NEW; END $$;
CREATE TRIGGER audited AFTER INSERT ON items FOR EACH ROW EXECUTE FUNCTION audit_item();
CREATE VIEW notes AS SELECT id, note FROM items;
CREATE RULE notes_update AS ON UPDATE TO notes DO INSTEAD UPDATE items SET note = NEW.note WHERE id = OLD.id;
`

// probeReset puts the database back as probeSchema left it.
const probeReset = `
DELETE FROM items WHERE id > 1; INSERT INTO items (id) VALUES (1) ON CONFLICT DO NOTHING;
UPDATE items SET note = ''; DELETE FROM audit;
DROP INDEX IF EXISTS items_note; SELECT setval('seq', 1, false);`

// probeState is the data of the probe schema as one text: whether a
// statement changed it is the ground truth a commit point is held to.
const probeState = `SELECT
  coalesce((SELECT string_agg(id || '=' || note, ',' ORDER BY id) FROM items), '') || '|' ||
  coalesce((SELECT string_agg(item::text, ',' ORDER BY item) FROM audit), '') || '|' ||
  (SELECT last_value || ':' || is_called FROM seq)`

func probeDatabase(t *testing.T) (dsn string, direct *pgx.Conn) {
	t.Helper()
	dsn = newDatabase(t)
	direct = connect(t, dsn)
	if _, err := direct.Exec(context.Background(), probeSchema); err != nil {
		t.Fatal(err)
	}
	return dsn, direct
}

func stateOf(t *testing.T, direct *pgx.Conn) string {
	t.Helper()
	var s string
	if err := direct.QueryRow(context.Background(), probeState).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// queryer runs one query on a new connection and returns the first column
// of its rows as text.
type queryer func(ctx context.Context, dsn, sql string) ([]string, error)

func pgxQuery(mode pgx.QueryExecMode) queryer {
	return func(ctx context.Context, dsn, sql string) ([]string, error) {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, err
		}
		cfg.DefaultQueryExecMode = mode
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		defer c.Close(ctx)
		rows, err := c.Query(ctx, sql)
		if err != nil {
			return nil, err
		}
		out := []string{}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				return nil, err
			}
			if len(vals) > 0 {
				out = append(out, fmt.Sprint(vals[0]))
			}
		}
		return out, rows.Err()
	}
}

func sqlQuery(ctx context.Context, dsn, query string) ([]string, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	out := []string{}
	for rows.Next() {
		vals := make([]any, len(cols))
		for i := range vals {
			vals[i] = new(sql.RawBytes)
		}
		if err := rows.Scan(vals...); err != nil {
			return nil, err
		}
		if len(vals) > 0 {
			out = append(out, string(*vals[0].(*sql.RawBytes)))
		}
	}
	return out, rows.Err()
}

// queryers reach the server every way a driver does: named prepared
// statements, the unnamed statement, the simple protocol, database/sql.
var queryers = []struct {
	name  string
	query queryer
}{
	{"pgx cache statement", pgxQuery(pgx.QueryExecModeCacheStatement)},
	{"pgx exec", pgxQuery(pgx.QueryExecModeExec)},
	{"pgx simple protocol", pgxQuery(pgx.QueryExecModeSimpleProtocol)},
	{"database/sql", sqlQuery},
}

type probeCase struct {
	name   string
	sql    string
	rows   []string // the first column of the rows the client must get; nil: not checked
	code   string   // the SQLSTATE the client must get
	text   bool     // a commit point by its text
	commit bool     // a commit point once the step is done
	ddl    bool     // changes the schema or nothing, not the data
}

var probeCases = []probeCase{
	{name: "select of a writing function", sql: "SELECT add_item(5)", rows: []string{"5"}, commit: true},
	{name: "writing set-returning function in FROM", sql: "SELECT * FROM add_items(6)", rows: []string{"6"}, commit: true},
	{name: "with over a writing function", sql: "WITH n AS (SELECT add_item(7) AS v) SELECT v FROM n", rows: []string{"7"}, commit: true},
	{name: "values of a writing function", sql: "VALUES (add_item(8))", rows: []string{"8"}, commit: true},
	{name: "explain analyze of an update", sql: "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) UPDATE items SET note = 'e' WHERE id = 1", commit: true},
	{name: "writing function that fails", sql: "SELECT add_item(1)", code: "23505"},
	{name: "stable function", sql: "SELECT item_count()", rows: []string{"1"}},
	{name: "plain read", sql: "SELECT id FROM items ORDER BY id", rows: []string{"1"}},
	{name: "read of no rows", sql: "SELECT id FROM items WHERE id < 0", rows: []string{}},
	{name: "read through a view", sql: "SELECT id FROM notes", rows: []string{"1"}},
	{name: "read that fails", sql: "SELECT 1/0", code: "22012"},
	{name: "update through a view with a rule", sql: "UPDATE notes SET note = 'r' WHERE id = 1", text: true, commit: true},
	{name: "insert whose trigger writes", sql: "INSERT INTO items (id) VALUES (14)", text: true, commit: true},
	{name: "call", sql: "CALL add_item_proc(10)", text: true, commit: true},
	{name: "call of a procedure that commits", sql: "CALL add_item_commit(11)", text: true, commit: true},
	{name: "do", sql: "DO $$ BEGIN INSERT INTO items (id) VALUES (12); END $$", text: true, commit: true},
	{name: "do that commits", sql: "DO $$ BEGIN INSERT INTO items (id) VALUES (13); COMMIT; END $$", text: true, commit: true},
	{name: "nextval", sql: "SELECT nextval('seq')", rows: []string{"1"}, text: true, commit: true},
	{name: "vacuum", sql: "VACUUM items", text: true, commit: true, ddl: true},
	{name: "create index concurrently", sql: "CREATE INDEX CONCURRENTLY items_note ON items (note)", text: true, commit: true, ddl: true},
	{name: "discard all", sql: "DISCARD ALL", ddl: true},
}

// A statement outside a transaction block is a commit point when it
// wrote, whatever its text says: the server is asked where the text cannot
// tell. The client sees its own results only, statements that cannot run
// in a transaction block still run, and every commit point changed the
// data and every change of the data was a commit point.
func TestCommitPointsFromTheServer(t *testing.T) {
	ctx := context.Background()
	dsn, direct := probeDatabase(t)
	for _, q := range queryers {
		for _, tc := range probeCases {
			t.Run(q.name+"/"+tc.name, func(t *testing.T) {
				if _, err := direct.Exec(ctx, probeReset); err != nil {
					t.Fatal(err)
				}
				before := stateOf(t, direct)
				var rec recorder
				p := listen(t, "d1", dsn, rec.hooks())
				rows, err := q.query(ctx, p.DSN(), tc.sql)
				if got := pgCode(err); got != tc.code || tc.code == "" && err != nil {
					t.Fatalf("%s: err = %v, want SQLSTATE %q", tc.sql, err, tc.code)
				}
				if tc.rows != nil && tc.code == "" {
					if diff := cmp.Diff(tc.rows, rows); diff != "" {
						t.Errorf("rows the client got mismatch (-want +got):\n%s", diff)
					}
				}
				var steps []wireproxy.Step
				for _, s := range rec.steps() {
					if s.SQL == tc.sql {
						steps = append(steps, s)
					}
				}
				var done []wireproxy.Step
				for _, a := range rec.afters() {
					if a.step.SQL == tc.sql {
						done = append(done, a.step)
					}
				}
				if len(steps) != 1 || len(done) != 1 {
					t.Fatalf("%d steps and %d After calls of %q, want 1 each", len(steps), len(done), tc.sql)
				}
				if steps[0].CommitPoint != tc.text {
					t.Errorf("CommitPoint before the step = %v, want %v (by its text)", steps[0].CommitPoint, tc.text)
				}
				if done[0].CommitPoint != tc.commit {
					t.Errorf("CommitPoint after the step = %v, want %v", done[0].CommitPoint, tc.commit)
				}
				if changed := stateOf(t, direct) != before; !tc.ddl && changed != done[0].CommitPoint {
					t.Errorf("the data changed: %v, but CommitPoint = %v", changed, done[0].CommitPoint)
				}
			})
		}
	}
}

// The server's answer alone, asked of every statement that can run in a
// transaction block, is the ground truth for what the text decides by
// itself: whatever the server says wrote, the text calls a commit point or
// asks about. And the server's answer matches the data: a statement wrote
// exactly when the data changed.
func TestTextNeverMissesTheServer(t *testing.T) {
	ctx := context.Background()
	dsn, direct := probeDatabase(t)
	cases := []struct {
		sql   string
		wrote bool
	}{
		{"SELECT add_item(5)", true},
		{"SELECT * FROM add_items(6)", true},
		{"WITH n AS (SELECT add_item(7) AS v) SELECT v FROM n", true},
		{"VALUES (add_item(8))", true},
		{"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) UPDATE items SET note = 'e' WHERE id = 1", true},
		{"SELECT add_item(1)", false},
		{"SELECT item_count()", false},
		{"SELECT id FROM items ORDER BY id", false},
		{"SELECT id FROM notes", false},
		{"TABLE items", false},
		{"UPDATE notes SET note = 'r' WHERE id = 1", true},
		{"INSERT INTO items (id) VALUES (14)", true},
		{"UPDATE items SET note = 'u' WHERE id = 1", true},
		{"DELETE FROM items WHERE id = 1", true},
		{"MERGE INTO items USING (VALUES (1)) v(id) ON items.id = v.id WHEN MATCHED THEN UPDATE SET note = 'm'", true},
		{"CALL add_item_proc(10)", true},
		{"DO $$ BEGIN INSERT INTO items (id) VALUES (12); END $$", true},
		{"COPY (SELECT add_item(9)) TO STDOUT", true},
	}
	for _, q := range queryers {
		for _, tc := range cases {
			t.Run(q.name+"/"+tc.sql, func(t *testing.T) {
				if _, err := direct.Exec(ctx, probeReset); err != nil {
					t.Fatal(err)
				}
				before := stateOf(t, direct)
				var rec recorder
				p := listen(t, "d1", dsn, rec.hooks())
				wireproxy.AskServerOnly(p)
				if strings.HasPrefix(tc.sql, "COPY") {
					c := connect(t, p.DSN())
					if _, err := c.PgConn().CopyTo(ctx, discard{}, tc.sql); err != nil {
						t.Fatal(err)
					}
				} else {
					_, _ = q.query(ctx, p.DSN(), tc.sql)
				}
				var wrote []bool
				for _, a := range rec.afters() {
					if a.step.SQL == tc.sql {
						wrote = append(wrote, a.step.CommitPoint)
					}
				}
				if len(wrote) != 1 {
					t.Fatalf("%d After calls of the step, want 1", len(wrote))
				}
				if wrote[0] != tc.wrote {
					t.Errorf("the server says it wrote: %v, want %v", wrote[0], tc.wrote)
				}
				if changed := stateOf(t, direct) != before; changed != wrote[0] {
					t.Errorf("the data changed: %v, but the server says it wrote: %v", changed, wrote[0])
				}
				if wrote[0] && !wireproxy.TextCommitPoint(tc.sql) && !wireproxy.TextAsks(tc.sql) {
					t.Errorf("the server says %q wrote; its text neither calls it a commit point nor asks", tc.sql)
				}
			})
		}
	}
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }

// The question is the step's own transaction's: other sessions writing
// beside it, in its database and in another, never make a read a commit
// point, nor keep a write from being one.
func TestCommitPointsIgnoreOtherSessions(t *testing.T) {
	ctx := context.Background()
	dsn, direct := probeDatabase(t)
	other := connect(t, newDatabase(t))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range []*pgx.Conn{direct, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				for _, q := range []string{`INSERT INTO items (id) VALUES ($1)`, `DELETE FROM items WHERE id = $1`} {
					if _, err := c.Exec(ctx, q, 100000+i); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	var rec recorder
	p := listen(t, "d1", dsn, rec.hooks())
	c := connect(t, p.DSN())
	for i := range 100 {
		if _, err := c.Exec(ctx, "SELECT item_count()"); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := c.QueryRow(ctx, "SELECT add_item($1)", 1000+i).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	reads, writes := 0, 0
	for _, a := range rec.afters() {
		switch {
		case a.step.SQL == "SELECT item_count()" && !a.step.CommitPoint:
			reads++
		case a.step.SQL == "SELECT add_item($1)" && a.step.CommitPoint:
			writes++
		default:
			t.Errorf("step %q: CommitPoint = %v", a.step.SQL, a.step.CommitPoint)
		}
	}
	if reads != 100 || writes != 100 {
		t.Errorf("%d reads and %d writes labelled right, want 100 each", reads, writes)
	}
}

// The client's results stay its own: several statements in one query
// string, a failing one among them, a pgx batch (one step of several
// executes), and the unnamed statement a client binds again after its
// Sync.
func TestProbeIsInvisible(t *testing.T) {
	ctx := context.Background()
	dsn, direct := probeDatabase(t)
	var rec recorder
	p := listen(t, "d1", dsn, rec.hooks())
	c := connect(t, p.DSN())

	results, err := c.PgConn().Exec(ctx, "SELECT 1; SELECT add_item(30); SELECT 'two'").ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range results {
		for _, row := range r.Rows {
			got = append(got, string(row[0]))
		}
		got = append(got, r.CommandTag.String())
	}
	if diff := cmp.Diff([]string{"1", "SELECT 1", "30", "SELECT 1", "two", "SELECT 1"}, got); diff != "" {
		t.Errorf("results of a multi-statement query mismatch (-want +got):\n%s", diff)
	}

	_, err = c.PgConn().Exec(ctx, "SELECT add_item(31); SELECT 1/0").ReadAll()
	if pgCode(err) != "22012" {
		t.Errorf("err = %v, want division by zero", err)
	}
	if n := count(t, direct, "SELECT count(*) FROM items WHERE id = 31"); n != 0 {
		t.Errorf("row 31 of a query string that failed: count = %d, want 0 (rolled back)", n)
	}

	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		cfg := mustParse(t, p.DSN())
		cfg.DefaultQueryExecMode = mode
		bc, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		b := &pgx.Batch{}
		var added, n int
		b.Queue("SELECT add_item($1)", 32+int(mode)).QueryRow(func(r pgx.Row) error { return r.Scan(&added) })
		b.Queue("SELECT item_count()").QueryRow(func(r pgx.Row) error { return r.Scan(&n) })
		if err := bc.SendBatch(ctx, b).Close(); err != nil {
			t.Fatalf("batch in mode %v: %v", mode, err)
		}
		if added != 32+int(mode) || n != count(t, direct, "SELECT count(*) FROM items") {
			t.Errorf("batch in mode %v: add_item = %d, item_count() = %d", mode, added, n)
		}
		bc.Close(ctx)
	}

	fe := rawSession(t, p.DSN())
	fe.Send(&pgproto3.Parse{Query: "SELECT add_item($1::int)"})
	for _, id := range []string{"40", "41"} {
		fe.Send(&pgproto3.Bind{Parameters: [][]byte{[]byte(id)}})
		fe.Send(&pgproto3.Execute{})
		fe.Send(&pgproto3.Sync{})
		if err := fe.Flush(); err != nil {
			t.Fatal(err)
		}
		var rows []string
		for {
			msg, err := fe.Receive()
			if err != nil {
				t.Fatal(err)
			}
			switch m := msg.(type) {
			case *pgproto3.ErrorResponse:
				t.Fatalf("binding the unnamed statement again: %s", m.Message)
			case *pgproto3.RowDescription:
				t.Errorf("a RowDescription nobody asked for: %v", m.Fields)
			case *pgproto3.DataRow:
				rows = append(rows, string(m.Values[0]))
			}
			if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
				break
			}
		}
		if diff := cmp.Diff([]string{id}, rows); diff != "" {
			t.Errorf("rows mismatch (-want +got):\n%s", diff)
		}
	}

	var commits []string
	for _, a := range rec.afters() {
		if a.step.CommitPoint {
			commits = append(commits, a.step.SQL)
		}
	}
	batch := "SELECT add_item($1);\nSELECT item_count()"
	want := []string{"SELECT 1; SELECT add_item(30); SELECT 'two'", batch, batch, "SELECT add_item($1::int)", "SELECT add_item($1::int)"}
	if diff := cmp.Diff(want, commits); diff != "" {
		t.Errorf("commit points mismatch (-want +got):\n%s", diff)
	}
}

// Why CALL and DO are commit points by their text: a procedure or a DO
// block may COMMIT, and a question asked after it sees only the
// transaction its COMMIT began (or, in a query string of its own, makes
// the COMMIT fail).
func TestTransactionControlDefeatsTheQuestion(t *testing.T) {
	ctx := context.Background()
	dsn, direct := probeDatabase(t)
	for _, q := range queryers {
		t.Run(q.name, func(t *testing.T) {
			if _, err := direct.Exec(ctx, probeReset); err != nil {
				t.Fatal(err)
			}
			var rec recorder
			p := listen(t, "d1", dsn, rec.hooks())
			wireproxy.AskServerOnly(p)
			_, err := q.query(ctx, p.DSN(), "CALL add_item_commit(11)")
			a := rec.afters()
			if len(a) != 1 {
				t.Fatalf("%d After calls, want 1", len(a))
			}
			rows := count(t, direct, "SELECT count(*) FROM items WHERE id = 11")
			switch {
			case pgCode(err) == "2D000" && rows == 0:
				// Appended to the query string, the question made an
				// implicit transaction block, where a procedure cannot
				// COMMIT.
			case err == nil && rows == 1 && !a[0].step.CommitPoint:
				// Asked after the procedure's COMMIT, the question saw
				// the new transaction, which wrote nothing.
			default:
				t.Errorf("err = %v, row written: %v, the server says it wrote: %v", err, rows == 1, a[0].step.CommitPoint)
			}
		})
	}
	if !wireproxy.TextCommitPoint("CALL add_item_commit(11)") || !wireproxy.TextCommitPoint("DO $$ BEGIN COMMIT; END $$") {
		t.Error("CALL and DO are no commit points by their text")
	}
}
