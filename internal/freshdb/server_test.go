package freshdb_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/internal/freshdb"
	"github.com/runtwice/twice/internal/pgserver"
)

func server(t testing.TB) freshdb.Server {
	t.Helper()
	srv, err := pgserver.Shared(context.Background())
	if err != nil {
		if os.Getenv("TWICE_DATABASE_URL") == "" {
			t.Skipf("no PostgreSQL server (set TWICE_DATABASE_URL): %v", err)
		}
		t.Fatal(err)
	}
	return srv
}

// fixture is a small schema: a few tables, a few rows, foreign keys,
// serial and identity columns, a trigger and a generated column.
var fixture = []freshdb.Step{{Name: "schema.sql", SQL: `
CREATE TABLE customers (id serial PRIMARY KEY, email text NOT NULL UNIQUE, points int NOT NULL DEFAULT 0);
CREATE TABLE orders (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	customer_id int NOT NULL REFERENCES customers,
	total numeric(10,2) NOT NULL,
	total_cents bigint GENERATED ALWAYS AS ((total * 100)::bigint) STORED,
	note text,
	tags text[]
);
CREATE TABLE audit (id serial PRIMARY KEY, what text NOT NULL);
CREATE FUNCTION audit_order() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO audit (what) VALUES ('order ' || NEW.id); RETURN NEW; END $$;
CREATE TRIGGER orders_audit AFTER INSERT ON orders FOR EACH ROW EXECUTE FUNCTION audit_order();
`}, {Name: "fixtures.sql", SQL: `
INSERT INTO customers (email, points) VALUES ('a@example.com', 10), ('b@example.com', 0), ('c@example.com', 5);
INSERT INTO orders (customer_id, total, note, tags) VALUES
	(1, 84000.00, 'it''s "quoted" \ back', '{a,"b c"}'),
	(2, 12.50, NULL, NULL),
	(1, 3.00, E'line\nbreak', '{}');
DELETE FROM customers WHERE id = 3;
`}}

// dumpContent is every user table's columns and rows plus every sequence's
// position, as text, for comparing databases.
func dumpContent(t testing.TB, connString string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var b strings.Builder
	rows, err := conn.Query(ctx, `
		SELECT format('%I.%I', n.nspname, c.relname), c.relkind::text,
		       (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
		        FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'S') AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'twice') AND n.nspname NOT LIKE 'pg\_%'
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	type rel struct{ name, kind, cols string }
	rels, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (rel, error) {
		var x rel
		return x, r.Scan(&x.name, &x.kind, &x.cols)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rels {
		fmt.Fprintf(&b, "%s %s (%s)\n", r.kind, r.name, r.cols)
		q := "SELECT t::text FROM " + r.name + " t ORDER BY 1"
		if r.kind == "S" {
			q = "SELECT last_value || ' ' || is_called FROM " + r.name
		}
		rows, err := conn.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		vals, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vals {
			b.WriteString("  " + v + "\n")
		}
	}
	return b.String()
}

func run(t testing.TB, connString string, sql string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), connString)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func databaseExists(t *testing.T, srv freshdb.Server, name string) bool {
	t.Helper()
	return queryOne[int64](t, srv.ConnString("postgres"), "SELECT count(*) FROM pg_database WHERE datname = $1", name) == 1
}

// connect opens a connection closed when the test ends.
func connect(t testing.TB, connString string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), connString)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n/2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}
