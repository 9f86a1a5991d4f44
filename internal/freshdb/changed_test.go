package freshdb_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/runtwice/twice/internal/freshdb"
)

// TestChangedSeesEveryWrite writes, one scenario at a time on one reused
// clone, in every way a job can reach a table, and checks that the
// server's change log names exactly the tables written (and their
// partitioned or inheritance parents and children), that DDL makes it
// unknown, and that the reset, which rewrites only those tables, still
// hands out the template's content with an empty log.
func TestChangedSeesEveryWrite(t *testing.T) {
	ctx := context.Background()
	tpl, d := reusedTemplate(t, "changed.sql", `
		CREATE TABLE plain (id serial PRIMARY KEY, v text);
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
		CREATE TABLE parted_old PARTITION OF parted FOR VALUES FROM ('2000-01-01') TO ('2020-01-01');
		CREATE TABLE parted_new PARTITION OF parted FOR VALUES FROM ('2020-01-01') TO ('2100-01-01');
		CREATE TABLE big_untouched AS SELECT g AS n FROM generate_series(1, 1000) g;
		INSERT INTO plain (v) VALUES ('x');
		INSERT INTO parent_row VALUES (1), (2);
		INSERT INTO child_row VALUES (1), (2);
		INSERT INTO parted VALUES ('2010-01-01', 1);`)
	want := dumpContent(t, d.ConnString)
	for _, sc := range []struct {
		name, sql string
		tables    []string // schema.table, sorted; unused when unknown
		unknown   bool
	}{
		{"nothing", `SELECT 1`, []string{}, false},
		{"an update", `UPDATE plain SET v = 'y'`, []string{"public.plain"}, false},
		{"an insert that conflicts", `INSERT INTO plain VALUES (1, 'z') ON CONFLICT DO NOTHING`, []string{"public.plain"}, false},
		{"a write through a trigger", `INSERT INTO audited VALUES (7)`, []string{"public.audit", "public.audited"}, false},
		{"a write through a function", `SELECT write_it(3)`, []string{"public.by_function"}, false},
		{"a cascading delete", `DELETE FROM parent_row WHERE id = 1`, []string{"public.child_row", "public.parent_row"}, false},
		{"an insert through the partitioned parent", `INSERT INTO parted VALUES ('2030-01-01', 2)`, []string{"public.parted", "public.parted_new", "public.parted_old"}, false},
		{"an insert into a partition", `INSERT INTO parted_old VALUES ('2001-01-01', 3)`, []string{"public.parted", "public.parted_old"}, false},
		{"a COPY", `COPY by_function FROM PROGRAM 'echo 5'`, []string{"public.by_function"}, false},
		{"a rolled-back insert that burns a sequence value", `BEGIN; INSERT INTO plain (v) VALUES ('never'); ROLLBACK`, []string{}, false},
		{"a write in a subtransaction rolled back", `BEGIN; SAVEPOINT s; DELETE FROM plain; ROLLBACK TO s; COMMIT`, []string{}, false},
		{"a sequence set back uncalled", `SELECT setval('plain_id_seq', 1, false)`, []string{}, false},
		{"a sequence drawn from", `SELECT nextval('plain_id_seq')`, []string{}, false},
		// TRUNCATE is a write, not DDL: the log notes it.
		{"a TRUNCATE", `TRUNCATE audit`, []string{"public.audit"}, false},
		{"a temporary table", `CREATE TEMP TABLE scratch (x int PRIMARY KEY); INSERT INTO scratch VALUES (1); DROP TABLE scratch`, []string{}, false},
		{"a table created by the job", `CREATE TABLE made (x int); INSERT INTO made VALUES (1)`, nil, true},
		{"a table created and dropped", `CREATE TABLE gone (x int); DROP TABLE gone`, nil, true},
		{"a column renamed", `ALTER TABLE plain RENAME COLUMN v TO w`, nil, true},
		{"a comment", `COMMENT ON TABLE plain IS 'changed'`, nil, true},
		{"DDL in replica mode", `SET session_replication_role = replica; ALTER TABLE audit ADD COLUMN extra int`, nil, true},
		{"a trigger disabled by the job", `ALTER TABLE plain DISABLE TRIGGER ALL; UPDATE plain SET v = 'hidden'`, nil, true},
		{"the DDL log's event trigger dropped", `DROP EVENT TRIGGER twice_ddl; CREATE TABLE unseen (x int)`, nil, true},
		{"a large object", `SELECT lo_from_bytea(0, 'blob')`, nil, true},
	} {
		run(t, d.ConnString, sc.sql)
		ch, err := d.Changed(ctx)
		if err != nil {
			t.Fatalf("%s: %v", sc.name, err)
		}
		if ch.Known == sc.unknown {
			t.Errorf("%s: Changed.Known = %t, want %t", sc.name, ch.Known, !sc.unknown)
		}
		if !sc.unknown {
			var got []string
			for id := range maps.Keys(ch.Tables) {
				got = append(got, id.Schema+"."+id.Name)
			}
			slices.Sort(got)
			if diff := cmp.Diff(sc.tables, got, cmpEmpty); diff != "" {
				t.Errorf("%s: changed tables mismatch (-want +got):\n%s", sc.name, diff)
			}
		}
		if err := d.Drop(ctx); err != nil {
			t.Fatalf("after %s: %v", sc.name, err)
		}
		if d, err = tpl.Fresh(ctx); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, dumpContent(t, d.ConnString)); diff != "" {
			t.Fatalf("after %s: content mismatch (-want +got):\n%s", sc.name, diff)
		}
		if n := queryOne[int64](t, d.ConnString, "SELECT count(*) FROM twice.changed"); n != 0 {
			t.Fatalf("after %s: the reset left %d notes in the change log", sc.name, n)
		}
	}
	if err := d.Drop(ctx); err != nil {
		t.Fatal(err)
	}
}

var cmpEmpty = cmp.Transformer("nonNil", func(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
})

// TestChangeLogDoesNotSerializeWriters: two transactions that write the
// same table at once each note it in the log; neither waits for the
// other (the log has no unique index), which lock_timeout would report.
func TestChangeLogDoesNotSerializeWriters(t *testing.T) {
	ctx := context.Background()
	_, d := reusedTemplate(t, "concurrent.sql", "\nCREATE TABLE t (id int);")
	defer d.Drop(ctx)
	a, b := connect(t, d.ConnString), connect(t, d.ConnString)
	for _, c := range []string{"BEGIN", "SET LOCAL lock_timeout = '2s'", "INSERT INTO t VALUES (1)"} {
		if _, err := a.Exec(ctx, c); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Exec(ctx, c); err != nil {
			t.Fatalf("the second writer: %s: %v", c, err)
		}
	}
	if _, err := a.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	ch, err := d.Changed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !ch.Known || !ch.Tables[freshdb.TableID{Schema: "public", Name: "t"}] || len(ch.Tables) != 1 {
		t.Errorf("Changed = %+v, want exactly public.t", ch)
	}
}
