package freshdb_test

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/freshdb"
)

func mapFS(files map[string]string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for name, text := range files {
		fsys[name] = &fstest.MapFile{Data: []byte(text)}
	}
	return fsys
}

// applied is each step as "name [layout]: SQL with blank lines dropped".
func applied(steps []freshdb.Step) []string {
	var out []string
	for _, s := range steps {
		var lines []string
		for l := range strings.Lines(s.SQL) {
			if l = strings.TrimSpace(l); l != "" {
				lines = append(lines, l)
			}
		}
		out = append(out, s.Name+" ["+s.Layout+"]: "+strings.Join(lines, " | "))
	}
	return out
}

func TestFromFSLayouts(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []string
	}{{
		name: "golang-migrate applies up files in version order, never down files",
		files: map[string]string{
			"m/10_refunds.up.sql":         "CREATE TABLE refunds ();",
			"m/10_refunds.down.sql":       "DROP TABLE refunds;",
			"m/2_orders.up.sql":           "CREATE TABLE orders ();",
			"m/2_orders.down.sql":         "DROP TABLE orders;",
			"m/000001_customers.up.sql":   "CREATE TABLE customers ();",
			"m/000001_customers.down.sql": "DROP TABLE customers;",
			"m/README.md":                 "not sql",
		},
		want: []string{
			"m/000001_customers.up.sql [golang-migrate up file]: CREATE TABLE customers ();",
			"m/2_orders.up.sql [golang-migrate up file]: CREATE TABLE orders ();",
			"m/10_refunds.up.sql [golang-migrate up file]: CREATE TABLE refunds ();",
		},
	}, {
		name: "goose applies the Up section in version order",
		files: map[string]string{
			"m/20240102150405_orders.sql": "-- +goose Up\nCREATE TABLE orders ();\n-- +goose Down\nDROP TABLE orders;\n",
			"m/3_customers.sql": `-- a comment before
-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETURN 1; END $$;
-- +goose StatementEnd
CREATE TABLE customers ();

-- +goose Down
-- +goose StatementBegin
DROP FUNCTION f();
-- +goose StatementEnd
DROP TABLE customers;
`,
			"m/10_no_down.sql": "-- +goose up\nCREATE TABLE x ();\n",
			"m/11_concurrently.sql": `-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY a ON x (id); -- one
CREATE INDEX CONCURRENTLY
  b ON x (id);
-- +goose StatementBegin
DO $$ BEGIN PERFORM 1; END $$;
-- +goose StatementEnd
-- +goose Down
DROP INDEX a;
`,
		},
		want: []string{
			"m/3_customers.sql [goose Up section]: -- +goose StatementBegin | CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETURN 1; END $$; | -- +goose StatementEnd | CREATE TABLE customers ();",
			"m/10_no_down.sql [goose Up section]: CREATE TABLE x ();",
			"m/11_concurrently.sql [goose Up section, NO TRANSACTION]: CREATE INDEX CONCURRENTLY a ON x (id); -- one",
			"m/11_concurrently.sql [goose Up section, NO TRANSACTION]: CREATE INDEX CONCURRENTLY | b ON x (id);",
			"m/11_concurrently.sql [goose Up section, NO TRANSACTION]: -- +goose StatementBegin | DO $$ BEGIN PERFORM 1; END $$; | -- +goose StatementEnd",
			"m/20240102150405_orders.sql [goose Up section]: CREATE TABLE orders ();",
		},
	}, {
		name: "tern applies what is above the split, files without one whole, in number order",
		files: map[string]string{
			"m/10_b.sql": "CREATE TABLE b ();\n---- create above / drop below ----\nDROP TABLE b;\n",
			"m/9_a.sql":  "CREATE TABLE a ();\n",
		},
		want: []string{
			"m/9_a.sql [tern, above create/drop]: CREATE TABLE a ();",
			"m/10_b.sql [tern, above create/drop]: CREATE TABLE b ();",
		},
	}, {
		name: "dbmate applies the up block in name order",
		files: map[string]string{
			"m/20240102000000_b.sql": "-- migrate:up transaction:false\nCREATE INDEX CONCURRENTLY i ON a (x);\n\n-- migrate:down\nDROP INDEX i;\n",
			"m/20240101000000_a.sql": "-- migrate:up\nCREATE TABLE a (x int);\n-- migrate:down\nDROP TABLE a;\n",
		},
		want: []string{
			"m/20240101000000_a.sql [dbmate migrate:up block]: CREATE TABLE a (x int);",
			"m/20240102000000_b.sql [dbmate migrate:up block]: CREATE INDEX CONCURRENTLY i ON a (x);",
		},
	}, {
		name: "sql-migrate applies the Up sections in version order, one statement at a time when notransaction",
		files: map[string]string{
			"m/10_later.sql": "-- +migrate Down\nDROP TABLE later;\n-- +migrate Up\nCREATE TABLE later ();\n",
			"m/2_orders.sql": `-- +migrate Up
-- +migrate StatementBegin
CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETURN 1; END $$;
-- +migrate StatementEnd
CREATE TABLE orders ();
-- +migrate Down
DROP TABLE orders;
DROP FUNCTION f();
`,
			"m/11_index.sql": "-- +migrate Up notransaction\nCREATE INDEX CONCURRENTLY a ON later (x);\nCREATE INDEX CONCURRENTLY b ON later (x);\n-- +migrate Down\nDROP INDEX a;\n",
			"m/init.sql":     "-- +migrate Up\nCREATE TABLE init ();\n",
		},
		want: []string{
			"m/2_orders.sql [sql-migrate Up section]: -- +migrate StatementBegin | CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETURN 1; END $$; | -- +migrate StatementEnd | CREATE TABLE orders ();",
			"m/10_later.sql [sql-migrate Up section]: CREATE TABLE later ();",
			"m/11_index.sql [sql-migrate Up section, notransaction]: CREATE INDEX CONCURRENTLY a ON later (x);",
			"m/11_index.sql [sql-migrate Up section, notransaction]: CREATE INDEX CONCURRENTLY b ON later (x);",
			"m/init.sql [sql-migrate Up section]: CREATE TABLE init ();",
		},
	}, {
		name: "goose ignores a Go file that is no migration",
		files: map[string]string{
			"m/1_a.sql":  "-- +goose Up\nCREATE TABLE a ();\n",
			"m/embed.go": "package m",
		},
		want: []string{"m/1_a.sql [goose Up section]: CREATE TABLE a ();"},
	}, {
		name: "plain files whole in name order",
		files: map[string]string{
			"m/b.sql":     "CREATE TABLE b ();",
			"m/a.sql":     "CREATE TABLE a ();\n-- migrate:upgrade is not an annotation",
			"m/sub/c.sql": "subdirectories are not read",
		},
		want: []string{
			"m/a.sql [plain SQL, name order]: CREATE TABLE a (); | -- migrate:upgrade is not an annotation",
			"m/b.sql [plain SQL, name order]: CREATE TABLE b ();",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps, err := freshdb.FromFS(mapFS(tt.files), "m")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, applied(steps)); diff != "" {
				t.Errorf("FromFS steps mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFromFSLayoutErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{{
		name: "golang-migrate and goose",
		files: map[string]string{
			"m/1_a.up.sql": "CREATE TABLE a ();",
			"m/2_b.sql":    "-- +goose Up\nCREATE TABLE b ();",
		},
		want: `[twice] migrations in "m" mix layouts: 1_a.up.sql is golang-migrate (.up.sql name), but 2_b.sql is goose (-- +goose Up); keep one tool's migrations per directory`,
	}, {
		name: "goose and a plain file",
		files: map[string]string{
			"m/1_a.sql": "-- +goose Up\nCREATE TABLE a ();",
			"m/2_b.sql": "CREATE TABLE b ();",
		},
		want: `[twice] migrations in "m" mix layouts: 1_a.sql is goose (-- +goose Up), but 2_b.sql has no migration tool's marker (plain SQL)`,
	}, {
		name: "dbmate and tern",
		files: map[string]string{
			"m/1_a.sql": "-- migrate:up\nCREATE TABLE a ();",
			"m/2_b.sql": "CREATE TABLE b ();\n---- create above / drop below ----\n",
		},
		want: `mix layouts: 1_a.sql is dbmate (-- migrate:up), but 2_b.sql is tern (---- create above / drop below ----)`,
	}, {
		name:  "goose without a version",
		files: map[string]string{"m/init.sql": "-- +goose Up\nCREATE TABLE a ();"},
		want:  `[twice] migrations in "m" (goose layout): init.sql does not start with a numeric version and an underscore`,
	}, {
		name: "duplicate version",
		files: map[string]string{
			"m/01_a.up.sql": "CREATE TABLE a ();",
			"m/1_b.up.sql":  "CREATE TABLE b ();",
		},
		want: `(golang-migrate layout): 01_a.up.sql and 1_b.up.sql have the same version 1`,
	}, {
		name:  "only down files",
		files: map[string]string{"m/1_a.down.sql": "DROP TABLE a;"},
		want:  `[twice] no up migrations in "m" (golang-migrate layout): only .down.sql files`,
	}, {
		name: "sql-migrate and goose",
		files: map[string]string{
			"m/1_a.sql": "-- +migrate Up\nCREATE TABLE a ();",
			"m/2_b.sql": "-- +goose Up\nCREATE TABLE b ();",
		},
		want: `mix layouts: 1_a.sql is sql-migrate (-- +migrate Up), but 2_b.sql is goose (-- +goose Up)`,
	}, {
		name: "goose Go migrations",
		files: map[string]string{
			"m/00001_users.sql":        "-- +goose Up\nCREATE TABLE users ();",
			"m/00002_backfill.go":      "package migrations",
			"m/00002_backfill_test.go": "package migrations",
		},
		want: `[twice] migrations in "m" (goose layout): 00002_backfill.go is a Go migration, which goose runs from the func it registers and twice cannot run from the directory; run the directory with goose's own provider in a harness.FuncDB setup (sqlDB, _ := db.SQL(); p, _ := goose.NewProvider(goose.DialectPostgres, sqlDB, migrationsFS); _, err := p.Up(ctx))`,
	}, {
		name:  "only goose Go migrations",
		files: map[string]string{"m/00001_users.go": "package migrations"},
		want:  `[twice] migrations in "m" (goose layout): 00001_users.go is a Go migration`,
	}, {
		name: "tern template include",
		files: map[string]string{
			"m/001_a.sql": "CREATE TABLE a ();\n---- create above / drop below ----\nDROP TABLE a;\n",
			"m/002_b.sql": "CREATE TABLE b ();\n\n{{ template \"shared/audit.sql\" . }}\n",
		},
		want: `[twice] migrations in "m" (tern layout): 002_b.sql:3 holds a template action ({{ template "shared/audit.sql" . }}), which tern expands before it runs the file and twice does not; run the directory with tern's own migrator in a harness.FuncDB setup (m, _ := migrate.NewMigrator(ctx, db.Conn(), "public.schema_version"); m.LoadMigrations(migrationsFS); err := m.Migrate(ctx))`,
	}, {
		name:  "tern template in a plain directory",
		files: map[string]string{"m/001_a.sql": "{{ template \"shared/x.sql\" }}\n"},
		want:  `[twice] migrations in "m" (plain SQL layout): 001_a.sql:1 holds a template action ({{ template "shared/x.sql" }}), which tern expands`,
	}, {
		name:  "no sql",
		files: map[string]string{"m/a.txt": ""},
		want:  `[twice] no *.sql migrations in "m"`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := freshdb.FromFS(mapFS(tt.files), "m")
			if err == nil || !strings.Contains(blame.Message(err), tt.want) {
				t.Errorf("FromFS error = %v\nwant it to contain %q", blame.Message(err), tt.want)
			}
		})
	}
}

// The directories of the issue, applied to a real database: golang-migrate
// with down files (a down file applied after its up file would drop the
// column), and goose files whose Down section would undo the Up.
func TestFromFSAppliesOnlyUp(t *testing.T) {
	ctx := context.Background()
	srv := server(t)
	tag := "-- " + randomHex(t, 8) + "\n"
	for _, tt := range []struct {
		name  string
		files map[string]string
	}{{
		name: "golang-migrate",
		files: map[string]string{
			"migrations/000001_users.up.sql":               tag + "CREATE TABLE users (id int PRIMARY KEY);",
			"migrations/000001_users.down.sql":             "DROP TABLE users;",
			"migrations/000004_add_verify_emails.up.sql":   "ALTER TABLE users ADD COLUMN is_email_verified bool NOT NULL DEFAULT false;",
			"migrations/000004_add_verify_emails.down.sql": "ALTER TABLE users DROP COLUMN is_email_verified;",
		},
	}, {
		name: "goose",
		files: map[string]string{
			"migrations/00001_users.sql": tag + "-- +goose Up\nCREATE TABLE users (id int PRIMARY KEY);\n-- +goose Down\nDROP TABLE users;\n",
			"migrations/00004_add_verify_emails.sql": `-- +goose Up
-- +goose StatementBegin
ALTER TABLE users ADD COLUMN is_email_verified bool NOT NULL DEFAULT false;
CREATE FUNCTION verified() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM users WHERE is_email_verified; $$;
-- +goose StatementEnd
-- +goose Down
ALTER TABLE users DROP COLUMN is_email_verified;
`,
			// one round trip would be one implicit transaction, where
			// CONCURRENTLY is refused
			"migrations/00005_index.sql": `-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY users_verified ON users (is_email_verified);
CREATE INDEX CONCURRENTLY users_both ON users (id, is_email_verified);
-- +goose Down
DROP INDEX users_verified;
`,
		},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			steps, err := freshdb.FromFS(mapFS(tt.files), "migrations")
			if err != nil {
				t.Fatal(err)
			}
			tpl, err := freshdb.Prepare(ctx, srv, steps)
			if err != nil {
				t.Fatal(err)
			}
			d, err := tpl.Fresh(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Drop(ctx)
			if got, want := dumpContent(t, d.ConnString), "r public.users (id integer, is_email_verified boolean)\n"; got != want {
				t.Errorf("schema after the migrations = %q, want %q", got, want)
			}
		})
	}
}

// A failing migration is named with its layout, at the file's own line.
func TestFromFSErrorNamesLayoutAndLine(t *testing.T) {
	ctx := context.Background()
	srv := server(t)
	steps, err := freshdb.FromFS(mapFS(map[string]string{
		"m/1_a.sql": "-- " + randomHex(t, 8) + "\n-- +goose Up\nCREATE TABLE a (id int);\n\nCREATE TABEL b (id int);\n-- +goose Down\nDROP TABLE a;\n",
	}), "m")
	if err != nil {
		t.Fatal(err)
	}
	_, err = freshdb.Prepare(ctx, srv, steps)
	want := `[twice] setup step failed: m/1_a.sql:5:8 (goose Up section): ERROR: syntax error at or near "TABEL"`
	if err == nil || !strings.Contains(blame.Message(err), want) {
		t.Errorf("Prepare error = %v\nwant it to contain %q", blame.Message(err), want)
	}
}

// Statements split from a goose NO TRANSACTION file keep their lines.
func TestFromFSGooseStatementsKeepLines(t *testing.T) {
	steps, err := freshdb.FromFS(mapFS(map[string]string{
		"m/1_a.sql": "-- +goose NO TRANSACTION\n-- +goose Up\nSELECT 1;\n\nSELECT\n  2;\n-- +goose Down\nSELECT 3;\n",
	}), "m")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range steps {
		got = append(got, strings.TrimRight(s.SQL, "\n"))
	}
	want := []string{"\n\nSELECT 1;", "\n\n\n\nSELECT\n  2;"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("statements mismatch (-want +got):\n%s", diff)
	}
}

// sql-migrate files applied to a real database: the Down section (DROP
// TABLE) must not run, and notransaction statements run one by one
// (CONCURRENTLY is refused in a transaction).
func TestFromFSSQLMigrateAppliesOnlyUp(t *testing.T) {
	ctx := context.Background()
	srv := server(t)
	steps, err := freshdb.FromFS(mapFS(map[string]string{
		"migrations/1_users.sql": "-- " + randomHex(t, 8) + "\n-- +migrate Up\nCREATE TABLE users (id int PRIMARY KEY);\n-- +migrate Down\nDROP TABLE users;\n",
		"migrations/2_index.sql": "-- +migrate Up notransaction\nCREATE INDEX CONCURRENTLY users_id ON users (id);\n-- +migrate Down\nDROP INDEX users_id;\n",
	}), "migrations")
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := freshdb.Prepare(ctx, srv, steps)
	if err != nil {
		t.Fatal(err)
	}
	d, err := tpl.Fresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Drop(ctx)
	if got, want := dumpContent(t, d.ConnString), "r public.users (id integer)\n"; got != want {
		t.Errorf("schema after the migrations = %q, want %q", got, want)
	}
}

// An error the server gives no position for is named with the lines of
// the statement that failed.
func TestStepErrorWithoutPositionNamesTheStatement(t *testing.T) {
	ctx := context.Background()
	srv := server(t)
	for _, tt := range []struct {
		name, sql, want string
	}{{
		name: "second statement on one line",
		sql:  "CREATE TABLE u (id int PRIMARY KEY);\nINSERT INTO u VALUES (1), (1);\n",
		want: "[twice] setup step failed: seed.sql, the statement on line 3: ERROR: duplicate key value violates unique constraint \"u_pkey\"",
	}, {
		name: "a statement over lines after quotes and comments",
		sql: `CREATE TABLE u (id int PRIMARY KEY, note text);
INSERT INTO u VALUES (1, 'a; b'), (2, $x$ c; $x$); -- one; two
/* a comment; */
INSERT INTO u
  VALUES (3, E'\\'';'),
         (1, 'again');
`,
		want: "[twice] setup step failed: seed.sql, the statement on lines 5-7: ERROR: duplicate key value",
	}, {
		name: "a failing query that returned rows first",
		sql:  "CREATE TABLE u (id int);\nINSERT INTO u VALUES (1), (0);\nSELECT 1 / id FROM u ORDER BY id DESC;\n",
		want: "[twice] setup step failed: seed.sql, the statement on line 4: ERROR: division by zero",
	}} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := freshdb.Prepare(ctx, srv, []freshdb.Step{{Name: "seed.sql", SQL: "-- " + randomHex(t, 8) + "\n" + tt.sql}})
			if err == nil || !strings.Contains(blame.Message(err), tt.want) {
				t.Errorf("Prepare error = %v\nwant it to contain %q", blame.Message(err), tt.want)
			}
		})
	}
}
