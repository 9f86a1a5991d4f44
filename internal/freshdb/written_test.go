package freshdb_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/internal/freshdb"
)

// TestWrittenCountsRows writes, one scenario at a time on one reused
// clone, in every way a job can reach a row, and checks that the write
// history counts exactly the rows committed: none for a statement that
// matched no row (a fixture the job never touches), none for what rolled
// back, each row a trigger, a function, a cascade or a partition wrote;
// that the queue's own connection can be left out; and that a reset
// empties it.
func TestWrittenCountsRows(t *testing.T) {
	ctx := context.Background()
	tpl, d := reusedTemplate(t, "written.sql", `
		CREATE TABLE orders (id int PRIMARY KEY, n int NOT NULL);
		CREATE TABLE audited (id int PRIMARY KEY);
		CREATE TABLE audit (what text);
		CREATE FUNCTION note() RETURNS trigger LANGUAGE plpgsql AS
			$$BEGIN INSERT INTO audit VALUES ('row ' || NEW.id); RETURN NEW; END$$;
		CREATE TRIGGER note AFTER INSERT ON audited FOR EACH ROW EXECUTE FUNCTION note();
		CREATE TABLE by_function (n int);
		CREATE FUNCTION write_it(k int) RETURNS void LANGUAGE sql AS $$INSERT INTO by_function VALUES (k)$$;
		CREATE TABLE parent_row (id int PRIMARY KEY);
		CREATE TABLE child_row (parent int REFERENCES parent_row ON DELETE CASCADE);
		CREATE TABLE parted (at date NOT NULL, v int) PARTITION BY RANGE (at);
		CREATE TABLE parted_new PARTITION OF parted FOR VALUES FROM ('2020-01-01') TO ('2100-01-01');
		INSERT INTO orders VALUES (9812, 0);
		INSERT INTO parent_row VALUES (1), (2);
		INSERT INTO child_row VALUES (1), (2);`)
	for _, sc := range []struct {
		name, sql string
		want      int64
	}{
		{"a read", `SELECT * FROM orders`, 0},
		{"an update of a row the fixture lacks", `UPDATE orders SET n = n + 1 WHERE id = 9813`, 0},
		{"an update", `UPDATE orders SET n = n + 1 WHERE id = 9812`, 1},
		{"an insert that conflicts", `INSERT INTO orders VALUES (9812, 5) ON CONFLICT DO NOTHING`, 0},
		{"an upsert", `INSERT INTO orders VALUES (9812, 5) ON CONFLICT (id) DO UPDATE SET n = excluded.n`, 1},
		{"a write through a trigger", `INSERT INTO audited VALUES (7)`, 2},
		{"a write through a function", `SELECT write_it(3)`, 1},
		{"a cascading delete", `DELETE FROM parent_row WHERE id = 1`, 2},
		{"an insert through the partitioned parent", `INSERT INTO parted VALUES ('2030-01-01', 2)`, 1},
		{"a COPY", `COPY by_function FROM PROGRAM 'printf "5\n6\n"'`, 2},
		{"a rolled-back insert", `BEGIN; INSERT INTO orders VALUES (1, 1); ROLLBACK`, 0},
		{"a write in a subtransaction rolled back", `BEGIN; SAVEPOINT s; DELETE FROM orders; ROLLBACK TO s; UPDATE orders SET n = 2; COMMIT`, 1},
		{"a TRUNCATE of an empty table", `TRUNCATE audit`, 0},
		// A TRUNCATE fires no row trigger: its own notes each row it
		// removes, as a delete.
		{"a TRUNCATE", `TRUNCATE child_row, orders`, 3},
	} {
		run(t, d.ConnString, sc.sql)
		n, known, err := d.Written(ctx)
		if err != nil {
			t.Fatalf("%s: %v", sc.name, err)
		}
		if !known || n != sc.want {
			t.Errorf("%s: Written = %d (known %t), want %d", sc.name, n, known, sc.want)
		}
		if err := d.Drop(ctx); err != nil {
			t.Fatalf("after %s: %v", sc.name, err)
		}
		if d, err = tpl.Fresh(ctx); err != nil {
			t.Fatal(err)
		}
		if n := queryOne[int64](t, d.ConnString, "SELECT count(*) FROM twice.history"); n != 0 {
			t.Fatalf("after %s: the reset left %d rows in the write history", sc.name, n)
		}
	}

	// The queue's own connection writes its bookkeeping: left out by its
	// backend.
	conn, err := pgx.Connect(ctx, d.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE orders SET n = 7`); err != nil {
		t.Fatal(err)
	}
	run(t, d.ConnString, `INSERT INTO orders VALUES (1, 1)`)
	if n, _, err := d.Written(ctx, conn.PgConn().PID()); err != nil || n != 1 {
		t.Errorf("Written(ctx, the queue's backend) = %d, %v; want 1, the other connection's row", n, err)
	}
	if n, _, err := d.Written(ctx); err != nil || n != 2 {
		t.Errorf("Written(ctx) = %d, %v; want 2", n, err)
	}
	if err := d.Drop(ctx); err != nil {
		t.Fatal(err)
	}
}

// A template prepared under WithoutHistory keeps the change log but notes
// no row: the history says it cannot tell.
func TestWithoutHistory(t *testing.T) {
	ctx := context.Background()
	restore := freshdb.WithoutHistory()
	tpl, d := reusedTemplate(t, "nohistory.sql", `
		CREATE TABLE orders (id int PRIMARY KEY, n int NOT NULL); INSERT INTO orders VALUES (1, 0);`)
	restore()
	run(t, d.ConnString, `UPDATE orders SET n = 1; TRUNCATE orders`)
	if n, known, err := d.Written(ctx); err != nil || known {
		t.Errorf("Written = %d, known %t, %v; want not known", n, known, err)
	}
	if ch, err := d.Changed(ctx); err != nil || !ch.Known || !ch.Tables[freshdb.TableID{Schema: "public", Name: "orders"}] {
		t.Errorf("Changed = %+v, %v; want orders, known", ch, err)
	}
	if n := queryOne[int64](t, d.ConnString, "SELECT count(*) FROM twice.history"); n != 0 {
		t.Errorf("the history holds %d rows, want none", n)
	}
	if from := tpl.UndoFrom(); from != 0 {
		t.Errorf("UndoFrom = %d, want 0: no table is reset through a history it has not", from)
	}
	if err := d.Drop(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestHistoryReadsRowsInOrder: each row written, in the order written,
// with its table as snapshots name it, its primary key (several columns
// joined) and its images.
func TestHistoryReadsRowsInOrder(t *testing.T) {
	ctx := context.Background()
	_, d := reusedTemplate(t, "history.sql", `
		CREATE TABLE orders (id int PRIMARY KEY, n int NOT NULL);
		CREATE SCHEMA billing;
		CREATE TABLE billing.lines (invoice int, line int, cents int, PRIMARY KEY (invoice, line));
		CREATE TABLE notes (body text);
		INSERT INTO orders VALUES (9812, 0);`)
	run(t, d.ConnString, `UPDATE orders SET n = n + 1 WHERE id = 9812;
		INSERT INTO billing.lines VALUES (7, 1, 500);
		INSERT INTO notes VALUES ('hi');
		DELETE FROM orders WHERE id = 9812`)
	got, known, err := d.History(ctx)
	if err != nil || !known {
		t.Fatalf("History = %v, %t, %v", got, known, err)
	}
	want := []freshdb.Write{
		{Table: "orders", Op: 'U', Key: "9812", Old: map[string]any{"id": float64(9812), "n": float64(0)}, New: map[string]any{"id": float64(9812), "n": float64(1)}},
		{Table: "billing.lines", Op: 'I', Key: "7,1", New: map[string]any{"invoice": float64(7), "line": float64(1), "cents": float64(500)}},
		{Table: "notes", Op: 'I', Key: "", New: map[string]any{"body": "hi"}},
		{Table: "orders", Op: 'D', Key: "9812", Old: map[string]any{"id": float64(9812), "n": float64(1)}},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(freshdb.Write{}, "PID", "At", "Query")); diff != "" {
		t.Errorf("History mismatch (-want +got):\n%s", diff)
	}
	// One client message, one statement: one backend, start and text.
	for _, w := range got {
		if w.PID != got[0].PID || w.PID == 0 || !w.At.Equal(got[0].At) || !strings.HasPrefix(w.Query, "UPDATE orders SET n = n + 1") {
			t.Errorf("write %+v: not the batch's statement (PID %d, at %v)", w, got[0].PID, got[0].At)
		}
	}
	// Two statements: two starts, each with its own text.
	run(t, d.ConnString, `UPDATE notes SET body = 'a'`)
	run(t, d.ConnString, `UPDATE notes SET body = 'b'`)
	got, _, err = d.History(ctx)
	if err != nil || len(got) != 6 {
		t.Fatalf("History = %v, %v", got, err)
	}
	if got[4].At.Equal(got[5].At) || got[4].Query != `UPDATE notes SET body = 'a'` || got[5].Query != `UPDATE notes SET body = 'b'` {
		t.Errorf("two statements' writes: %+v, %+v", got[4], got[5])
	}
	if err := d.Drop(ctx); err != nil {
		t.Fatal(err)
	}
}
