package freshdb_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/freshdb"
)

const wantFixture = `r public.audit (id integer, what text)
  (1,"order 1")
  (2,"order 2")
  (3,"order 3")
S public.audit_id_seq (last_value bigint, log_cnt bigint, is_called boolean)
  3 true
r public.customers (id integer, email text, points integer)
  (1,a@example.com,10)
  (2,b@example.com,0)
S public.customers_id_seq (last_value bigint, log_cnt bigint, is_called boolean)
  3 true
r public.orders (id bigint, customer_id integer, total numeric(10,2), total_cents bigint, note text, tags text[])
  (1,1,84000.00,8400000,"it's ""quoted"" \\ back","{a,""b c""}")
  (2,2,12.50,1250,,)
  (3,1,3.00,300,"line
break",{})
S public.orders_id_seq (last_value bigint, log_cnt bigint, is_called boolean)
  3 true
`

func TestFreshDatabasesAreIdentical(t *testing.T) {
	ctx := context.Background()
	srv := server(t)
	for _, variant := range []struct{ name, how, strategy string }{
		{"reuse", "reuse", ""},
		{"clone WAL_LOG", "clone", "WAL_LOG"},
		{"clone FILE_COPY", "clone", "FILE_COPY"},
	} {
		t.Run(variant.name, func(t *testing.T) {
			tpl, err := freshdb.Prepare(ctx, srv, fixture)
			if err != nil {
				t.Fatal(err)
			}
			if variant.how == "reuse" {
				if why := freshdb.ResetUnavailable(tpl); why != "" {
					t.Fatalf("template cannot be reset in place: %s", why)
				}
			}
			tpl = freshdb.Variant(tpl, variant.how, variant.strategy)
			// Held at once: each is its own database.
			var dbs []*freshdb.Database
			names := map[string]bool{}
			for range 3 {
				d, err := tpl.Fresh(ctx)
				if err != nil {
					t.Fatal(err)
				}
				dbs = append(dbs, d)
				names[d.Name] = true
				if !strings.HasPrefix(d.Name, freshdb.RunPrefix()) {
					t.Errorf("Name = %q, want prefix %q", d.Name, freshdb.RunPrefix())
				}
			}
			if len(names) != 3 {
				t.Errorf("3 databases held at once have %d distinct names: %v", len(names), names)
			}
			for _, d := range dbs {
				if diff := cmp.Diff(wantFixture, dumpContent(t, d.ConnString)); diff != "" {
					t.Errorf("database %s content mismatch (-want +got):\n%s", d.Name, diff)
				}
			}
			for _, d := range dbs {
				if err := d.Drop(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// scribble changes everything a handler might: rows in every table (through
// the trigger too), sequences, and leaves sessions open.
const scribble = `
UPDATE customers SET points = points + 50 WHERE id = 1;
INSERT INTO customers (email) VALUES ('new@example.com');
INSERT INTO orders (customer_id, total) VALUES (2, 1.00);
DELETE FROM orders WHERE id = 2;
SELECT nextval('audit_id_seq');
`

func TestChangesDoNotShowInTheNextDatabase(t *testing.T) {
	ctx := context.Background()
	srv := server(t)
	tpl, err := freshdb.Prepare(ctx, srv, fixture)
	if err != nil {
		t.Fatal(err)
	}
	for _, variant := range []struct{ name, how, strategy string }{
		{"reuse", "reuse", ""},
		{"clone", "clone", "WAL_LOG"},
	} {
		t.Run(variant.name, func(t *testing.T) {
			tpl := freshdb.Variant(tpl, variant.how, variant.strategy)
			var seen []string
			for i := range 3 {
				d, err := tpl.Fresh(ctx)
				if err != nil {
					t.Fatal(err)
				}
				seen = append(seen, d.Name)
				if diff := cmp.Diff(wantFixture, dumpContent(t, d.ConnString)); diff != "" {
					t.Fatalf("scenario %d: database %s content mismatch (-want +got):\n%s", i, d.Name, diff)
				}
				run(t, d.ConnString, scribble)
				// A session left open (a crashed delivery's) must not block
				// the reset or see the next scenario.
				leak, err := pgx.Connect(ctx, d.ConnString)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := leak.Exec(ctx, "BEGIN; INSERT INTO audit (what) VALUES ('uncommitted')"); err != nil {
					t.Fatal(err)
				}
				if err := d.Drop(ctx); err != nil {
					t.Fatal(err)
				}
				leak.Close(ctx)
			}
			if variant.how == "reuse" && seen[0] != seen[1] {
				t.Logf("reuse handed out %v (expected the same database again)", seen)
			}
		})
	}
}

func TestSchemaChangeIsNotReused(t *testing.T) {
	ctx := context.Background()
	srv := server(t)
	tpl, err := freshdb.Prepare(ctx, srv, fixture)
	if err != nil {
		t.Fatal(err)
	}
	tpl = freshdb.Variant(tpl, "reuse", "")
	d, err := tpl.Fresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	run(t, d.ConnString, "ALTER TABLE customers ADD COLUMN nickname text; CREATE TABLE extra (x int)")
	first := d.Name
	if err := d.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if databaseExists(t, srv, first) {
		t.Errorf("database %s with a changed schema still exists after Drop, want it dropped", first)
	}
	d, err = tpl.Fresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Drop(ctx)
	if diff := cmp.Diff(wantFixture, dumpContent(t, d.ConnString)); diff != "" {
		t.Errorf("next database content mismatch (-want +got):\n%s", diff)
	}
}

func TestConcurrentCallers(t *testing.T) {
	ctx := context.Background()
	srv := server(t)
	steps := []freshdb.Step{{Name: "SQL", SQL: "CREATE TABLE hits (worker int PRIMARY KEY); -- concurrent " + randomHex(t, 8)}}

	const n = 6
	tpls := make([]*freshdb.Template, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { tpls[i], errs[i] = freshdb.Prepare(ctx, srv, steps) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if tpls[i] != tpls[0] {
			t.Fatalf("concurrent Prepare %d built its own template %s, want the shared %s", i, tpls[i].Name, tpls[0].Name)
		}
	}

	// Every worker holds its own connection at the same time and sees
	// only its own write.
	dbs := make([]*freshdb.Database, n)
	conns := make([]*pgx.Conn, n)
	for i := range n {
		wg.Go(func() {
			dbs[i], errs[i] = tpls[0].Fresh(ctx)
			if errs[i] != nil {
				return
			}
			conns[i], errs[i] = pgx.Connect(ctx, dbs[i].ConnString)
			if errs[i] != nil {
				return
			}
			_, errs[i] = conns[i].Exec(ctx, "INSERT INTO hits VALUES ($1)", i)
		})
	}
	wg.Wait()
	names := map[string]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		names[dbs[i].Name] = true
		var got []int32
		rows, err := conns[i].Query(ctx, "SELECT worker FROM hits")
		if err == nil {
			got, err = pgx.CollectRows(rows, pgx.RowTo[int32])
		}
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]int32{int32(i)}, got); diff != "" {
			t.Errorf("worker %d rows mismatch (-want +got):\n%s", i, diff)
		}
	}
	if len(names) != n {
		t.Errorf("%d concurrent Fresh calls got %d distinct databases", n, len(names))
	}
	for i := range n {
		conns[i].Close(ctx)
		wg.Go(func() { errs[i] = dbs[i].Drop(ctx) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestDropRefusesForeignNames(t *testing.T) {
	ctx := context.Background()
	srv := server(t)
	tpl, err := freshdb.Prepare(ctx, srv, fixture)
	if err != nil {
		t.Fatal(err)
	}
	mine, err := tpl.Fresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Drop(ctx)

	foreign := "freshdb_foreign_" + randomHex(t, 8)
	run(t, srv.ConnString("postgres"), "CREATE DATABASE "+foreign)
	defer run(t, srv.ConnString("postgres"), "DROP DATABASE IF EXISTS "+foreign)

	for _, tt := range []struct {
		name string
		db   *freshdb.Database
	}{
		{"zero Database with a foreign name", &freshdb.Database{Name: foreign, ConnString: srv.ConnString(foreign)}},
		{"zero Database with the maintenance name", &freshdb.Database{Name: "postgres"}},
		{"zero Database with this run's own name", &freshdb.Database{Name: mine.Name, ConnString: mine.ConnString}},
		{"name not generated by this run", &freshdb.Database{Name: freshdb.RunPrefix() + "d999999"}},
		{"nil", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.db.Drop(ctx)
			if err == nil || !strings.Contains(blame.Message(err), "[twice] internal: refusing to drop") {
				t.Errorf("Drop = %v, want a refusal", err)
			}
		})
	}
	if !databaseExists(t, srv, foreign) {
		t.Errorf("foreign database %s is gone", foreign)
	}
	if !databaseExists(t, srv, mine.Name) {
		t.Errorf("database %s handed out to this test is gone", mine.Name)
	}
}

func TestKeep(t *testing.T) {
	ctx := context.Background()
	srv := server(t)
	tpl, err := freshdb.Prepare(ctx, srv, fixture)
	if err != nil {
		t.Fatal(err)
	}
	d, err := tpl.Fresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	run(t, d.ConnString, "UPDATE customers SET points = 99")
	old := d.Name
	if err := d.Keep(ctx); err != nil {
		t.Fatal(err)
	}
	defer run(t, srv.ConnString("postgres"), "DROP DATABASE IF EXISTS "+d.Name)
	if want := "twice_kept_" + freshdb.RunID() + "_"; !strings.HasPrefix(d.Name, want) {
		t.Errorf("kept Name = %q, want prefix %q", d.Name, want)
	}
	if databaseExists(t, srv, old) {
		t.Errorf("old name %s still exists", old)
	}
	if err := d.Drop(ctx); err != nil {
		t.Errorf("Drop after Keep = %v, want nil (no-op)", err)
	}
	if _, err := freshdb.CleanStale(ctx, srv); err != nil {
		t.Fatal(err)
	}
	if !databaseExists(t, srv, d.Name) {
		t.Fatalf("kept database %s is gone", d.Name)
	}
	if got := dumpContent(t, d.ConnString); !strings.Contains(got, "(1,a@example.com,99)") {
		t.Errorf("kept database lost the test's change:\n%s", got)
	}
}

func TestStepErrors(t *testing.T) {
	ctx := context.Background()
	srv := server(t)
	tag := randomHex(t, 8) // a content hash of its own, so nothing is cached
	tests := []struct {
		name  string
		steps func() ([]freshdb.Step, error)
		want  []string
	}{{
		name: "syntax error in a migration",
		steps: func() ([]freshdb.Step, error) {
			return freshdb.FromFS(fstest.MapFS{
				"migrations/001_ok.sql":  {Data: []byte("-- " + tag + "\nCREATE TABLE a (id int);\n")},
				"migrations/002_bad.sql": {Data: []byte("CREATE TABLE b (id int);\n\n-- broken:\nCREATE TABEL c (id int);\n")},
			}, "migrations")
		},
		want: []string{"[twice] setup step failed: migrations/002_bad.sql:4:8 (plain SQL, name order): ERROR: syntax error at or near \"TABEL\" (SQLSTATE 42601)"},
	}, {
		name: "missing relation after multibyte text",
		steps: func() ([]freshdb.Step, error) {
			return []freshdb.Step{{Name: "fixtures.sql", SQL: "-- " + tag + "\nSELECT 'héhé';\n  INSERT INTO nosuch VALUES (1);"}}, nil
		},
		want: []string{"fixtures.sql:3:15: ERROR: relation \"nosuch\" does not exist (SQLSTATE 42P01)"},
	}, {
		name: "constraint violation without position",
		steps: func() ([]freshdb.Step, error) {
			return []freshdb.Step{{Name: "seed.sql", SQL: "-- " + tag + "\nCREATE TABLE u (id int PRIMARY KEY); INSERT INTO u VALUES (1), (1);"}}, nil
		},
		want: []string{"setup step failed: seed.sql, the statement on line 2: ERROR: duplicate key value violates unique constraint \"u_pkey\" (SQLSTATE 23505); DETAIL: Key (id)=(1) already exists."},
	}, {
		name: "Go func",
		steps: func() ([]freshdb.Step, error) {
			return []freshdb.Step{{Name: "seedCustomers " + tag, Func: func(ctx context.Context, conn *pgx.Conn) error {
				return fmt.Errorf("no seed file")
			}}}, nil
		},
		want: []string{"[twice] setup step seedCustomers " + tag + " failed: no seed file"},
	}, {
		name: "Go func that panics",
		steps: func() ([]freshdb.Step, error) {
			return []freshdb.Step{{Name: "panicky " + tag, Func: func(ctx context.Context, conn *pgx.Conn) error {
				panic("boom")
			}}}, nil
		},
		want: []string{"[twice] setup step panicky " + tag + " panicked: boom"},
	}}
	if _, err := freshdb.Prepare(ctx, srv, fixture); err != nil { // the run is started
		t.Fatal(err)
	}
	before := databasesWithPrefix(t, srv.ConnString("postgres"), freshdb.RunPrefix()+"t")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps, err := tt.steps()
			if err != nil {
				t.Fatal(err)
			}
			_, err = freshdb.Prepare(ctx, srv, steps)
			if err == nil {
				t.Fatal("Prepare succeeded, want error")
			}
			for _, w := range tt.want {
				if !strings.Contains(blame.Message(err), w) {
					t.Errorf("Prepare error = %q\nwant it to contain %q", blame.Message(err), w)
				}
			}
		})
	}
	if after := databasesWithPrefix(t, srv.ConnString("postgres"), freshdb.RunPrefix()+"t"); !cmp.Equal(before, after) {
		t.Errorf("failed builds left templates behind: before %v, after %v", before, after)
	}
}

func TestStepMisuse(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		step freshdb.Step
		want string
	}{
		{"both SQL and Func", freshdb.Step{Name: "x", SQL: "SELECT 1", Func: func(context.Context, *pgx.Conn) error { return nil }}, "sets both SQL and Func"},
		{"unnamed Func", freshdb.Step{Func: func(context.Context, *pgx.Conn) error { return nil }}, "Func without a Name"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// misuse fails before any server is needed
			_, err := freshdb.Prepare(ctx, nil, []freshdb.Step{tt.step})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Prepare = %v, want error containing %q", err, tt.want)
			}
		})
	}
}
