package wireproxy_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
)

// wantStep is the part of a step a driver determines.
type wantStep struct {
	SQL           string
	CommitPoint   bool
	InTransaction bool
}

func TestStepsPerDriver(t *testing.T) {
	dsn := newDatabase(t)
	pgxWith := func(mode pgx.QueryExecMode, run func(ctx context.Context, c *pgx.Conn) error) func(ctx context.Context, dsn string) error {
		return func(ctx context.Context, dsn string) error {
			cfg, err := pgx.ParseConfig(dsn)
			if err != nil {
				return err
			}
			cfg.DefaultQueryExecMode = mode
			c, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				return err
			}
			defer c.Close(ctx)
			return run(ctx, c)
		}
	}
	selectTwice := func(ctx context.Context, c *pgx.Conn) error {
		for i := range 2 {
			var n int
			if err := c.QueryRow(ctx, "SELECT $1::int", i).Scan(&n); err != nil {
				return err
			}
		}
		return nil
	}
	insertInTx := func(ctx context.Context, c *pgx.Conn) error {
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO items (id) VALUES ($1)", 100)
			return err
		})
	}
	twoSelects := []wantStep{{SQL: "SELECT $1::int"}, {SQL: "SELECT $1::int"}}
	txSteps := []wantStep{
		{SQL: "begin"},
		{SQL: "INSERT INTO items (id) VALUES ($1)", InTransaction: true},
		{SQL: "commit", CommitPoint: true, InTransaction: true},
	}

	for _, tc := range []struct {
		name string
		run  func(ctx context.Context, dsn string) error
		want []wantStep
	}{
		{"pgx cache: a statement run twice is 2 steps", pgxWith(pgx.QueryExecModeCacheStatement, selectTwice), twoSelects},
		{"pgx cache describe", pgxWith(pgx.QueryExecModeCacheDescribe, selectTwice), twoSelects},
		{"pgx describe exec", pgxWith(pgx.QueryExecModeDescribeExec, selectTwice), twoSelects},
		{"pgx exec", pgxWith(pgx.QueryExecModeExec, selectTwice), twoSelects},
		{"pgx simple protocol", pgxWith(pgx.QueryExecModeSimpleProtocol, selectTwice),
			[]wantStep{{SQL: "SELECT  '0' ::int"}, {SQL: "SELECT  '1' ::int"}}},
		{"pgx prepare only is no step", pgxWith(pgx.QueryExecModeCacheStatement, func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Prepare(ctx, "p1", "SELECT $1::int")
			return err
		}), nil},
		{"pgx ping is no step", pgxWith(pgx.QueryExecModeCacheStatement, func(ctx context.Context, c *pgx.Conn) error {
			return c.Ping(ctx)
		}), nil},
		{"pgxpool ping is no step", func(ctx context.Context, dsn string) error {
			pool, err := pgxpool.New(ctx, dsn)
			if err != nil {
				return err
			}
			defer pool.Close()
			return pool.Ping(ctx)
		}, nil},
		{"pgx transaction: COMMIT is the commit point", pgxWith(pgx.QueryExecModeCacheStatement, insertInTx), txSteps},
		{"pgx simple protocol transaction", pgxWith(pgx.QueryExecModeSimpleProtocol, insertInTx), []wantStep{
			{SQL: "begin"},
			{SQL: "INSERT INTO items (id) VALUES ( '100' )", InTransaction: true},
			{SQL: "commit", CommitPoint: true, InTransaction: true},
		}},
		{"pgx autocommit write is a commit point, a read is not", pgxWith(pgx.QueryExecModeCacheStatement, func(ctx context.Context, c *pgx.Conn) error {
			if _, err := c.Exec(ctx, "UPDATE items SET note = $1 WHERE id = 1", "x"); err != nil {
				return err
			}
			_, err := c.Exec(ctx, "SELECT count(*) FROM items")
			return err
		}), []wantStep{
			{SQL: "UPDATE items SET note = $1 WHERE id = 1", CommitPoint: true},
			{SQL: "SELECT count(*) FROM items"},
		}},
		{"pgx batch is one step", pgxWith(pgx.QueryExecModeCacheStatement, func(ctx context.Context, c *pgx.Conn) error {
			b := &pgx.Batch{}
			b.Queue("INSERT INTO items (id) VALUES ($1)", 200)
			b.Queue("SELECT count(*) FROM items WHERE id > $1", 0)
			return c.SendBatch(ctx, b).Close()
		}), []wantStep{{SQL: "INSERT INTO items (id) VALUES ($1);\nSELECT count(*) FROM items WHERE id > $1", CommitPoint: true}}},
		{"pgx copy from is one step", pgxWith(pgx.QueryExecModeCacheStatement, func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.CopyFrom(ctx, pgx.Identifier{"items"}, []string{"id"}, pgx.CopyFromRows([][]any{{300}, {301}}))
			return err
		}), []wantStep{{SQL: `copy "items" ( "id" ) from stdin binary;`, CommitPoint: true}}},
		{"simple multi-statement query is one step", pgxWith(pgx.QueryExecModeCacheStatement, func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, "BEGIN; INSERT INTO items (id) VALUES (400); COMMIT")
			return err
		}), []wantStep{{SQL: "BEGIN; INSERT INTO items (id) VALUES (400); COMMIT", CommitPoint: true}}},
		{"database/sql over pgx stdlib", func(ctx context.Context, dsn string) error {
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				return err
			}
			defer db.Close()
			if err := db.PingContext(ctx); err != nil {
				return err
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO items (id) VALUES ($1)", 500); err != nil {
				return err
			}
			if err := tx.Commit(); err != nil {
				return err
			}
			var n int
			return db.QueryRowContext(ctx, "SELECT count(*) FROM items WHERE id = $1", 500).Scan(&n)
		}, []wantStep{
			{SQL: "begin"},
			{SQL: "INSERT INTO items (id) VALUES ($1)", InTransaction: true},
			{SQL: "commit", CommitPoint: true, InTransaction: true},
			{SQL: "SELECT count(*) FROM items WHERE id = $1"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			direct := connect(t, dsn)
			if _, err := direct.Exec(ctx, "DELETE FROM items WHERE id > 1"); err != nil {
				t.Fatal(err)
			}
			var rec recorder
			p := listen(t, "d1", dsn, rec.hooks())
			if err := tc.run(ctx, p.DSN()); err != nil {
				t.Fatal(err)
			}
			var got []wantStep
			for i, s := range rec.steps() {
				got = append(got, wantStep{SQL: s.SQL, CommitPoint: s.CommitPoint, InTransaction: s.InTransaction})
				if s.Index != i+1 || s.Delivery != "d1" || s.PID == 0 {
					t.Errorf("step %d: Index = %d, Delivery = %q, PID = %d; want %d, d1, a backend", i+1, s.Index, s.Delivery, s.PID, i+1)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("steps mismatch (-want +got):\n%s", diff)
			}
			afters := rec.afters()
			if len(afters) != len(got) {
				t.Errorf("After was called %d times for %d steps", len(afters), len(got))
			}
			for _, a := range afters {
				if a.err != nil {
					t.Errorf("After(step %d) err = %v, want nil", a.step.Index, a.err)
				}
			}
			if fl := p.InFlight(); len(fl) != 0 {
				t.Errorf("InFlight() = %v after the handler returned, want none", fl)
			}
		})
	}
}

// An error inside an extended batch: the server skips to Sync, the step
// ends with the error and the connection goes on.
func TestStepErrorInBatch(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	var rec recorder
	p := listen(t, "d1", dsn, rec.hooks())
	c := connect(t, p.DSN())
	_, err := c.Exec(ctx, "INSERT INTO items (id) VALUES ($1)", 1)
	if code := pgCode(err); code != "23505" {
		t.Fatalf("duplicate insert: err = %v, want a unique violation (23505)", err)
	}
	if _, err := c.Exec(ctx, "INSERT INTO items (id) VALUES ($1)", 2); err != nil {
		t.Fatalf("insert after the failed one: %v", err)
	}
	afters := rec.afters()
	if len(afters) != 2 {
		t.Fatalf("After called %d times, want 2", len(afters))
	}
	if code := pgCode(afters[0].err); code != "23505" {
		t.Errorf("After(step 1) err = %v, want the unique violation", afters[0].err)
	}
	if afters[1].err != nil {
		t.Errorf("After(step 2) err = %v, want nil", afters[1].err)
	}
}

func TestSSLModePrefer(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	var rec recorder
	p := listen(t, "d1", dsn, rec.hooks())
	prefer, err := pgx.ParseConfig(replaceSSLMode(p.DSN(), "prefer"))
	if err != nil {
		t.Fatal(err)
	}
	if prefer.TLSConfig == nil {
		t.Fatal("sslmode=prefer parsed without a TLS attempt; the test would prove nothing")
	}
	c, err := pgx.ConnectConfig(ctx, prefer)
	if err != nil {
		t.Fatalf("connecting with sslmode=prefer: %v", err)
	}
	defer c.Close(ctx)
	if n := count(t, c, "SELECT 7"); n != 7 {
		t.Errorf("SELECT 7 = %d", n)
	}
	if len(rec.steps()) != 1 {
		t.Errorf("%d steps, want 1", len(rec.steps()))
	}
}

func replaceSSLMode(dsn, mode string) string {
	const disable = "sslmode=disable"
	for i := 0; i+len(disable) <= len(dsn); i++ {
		if dsn[i:i+len(disable)] == disable {
			return dsn[:i] + "sslmode=" + mode + dsn[i+len(disable):]
		}
	}
	return dsn
}
