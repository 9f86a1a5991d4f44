package harness_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
)

// verifyJob marks user 1 verified: idempotent, and it fails when the
// setup did not make the table and row.
var verifyJob = harness.Job{Name: "verify-email", Handler: func(ctx context.Context, d *harness.Delivery) error {
	tag, err := d.DB.Exec(ctx, `UPDATE users SET is_email_verified = true WHERE id = 1`)
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("updated %d users, want 1", tag.RowsAffected())
	}
	return err
}}

const usersSchema = `CREATE TABLE users (id int PRIMARY KEY, is_email_verified bool NOT NULL DEFAULT false);
INSERT INTO users (id) VALUES (1);`

// runSetup checks verifyJob under one fault on the given setups.
func runSetup(t *testing.T, cfg harness.Config) (*harness.Result, error) {
	t.Helper()
	cfg.Faults = []faults.Fault{faults.RunTwice()}
	res, err := harness.Run(t.Context(), verifyJob, cfg)
	if res != nil {
		t.Cleanup(func() { res.DropDatabases(context.Background()) })
	}
	return res, err
}

func requireIdempotent(t *testing.T, res *harness.Result, err error) {
	t.Helper()
	require.NoError(t, err)
	require.Len(t, res.Scenarios, 1)
	assert.Equal(t, result.Idempotent, res.Scenarios[0].Verdict)
}

// The ways in a setup func gets: a pool (River, tern), a *sql.DB
// (golang-migrate, sqlx) and the connection string (pop, a CLI). The pool
// and the *sql.DB belong to the harness and are closed after the step.
func TestFuncDB(t *testing.T) {
	t.Run("pool", func(t *testing.T) {
		var pool *pgxpool.Pool
		res, err := runSetup(t, harness.Config{Setup: []harness.Setup{harness.FuncDB(func(ctx context.Context, db *harness.SetupDB) error {
			var err error
			if pool, err = db.Pool(ctx); err != nil {
				return err
			}
			again, err := db.Pool(ctx)
			if err == nil && again != pool {
				err = fmt.Errorf("second Pool call made another pool")
			}
			if err != nil {
				return err
			}
			_, err = pool.Exec(ctx, usersSchema)
			return err
		})}})
		requireIdempotent(t, res, err)
		require.NotNil(t, pool)
		_, err = pool.Acquire(t.Context())
		assert.Error(t, err, "the setup's pool is still open after the step")
	})
	t.Run("database/sql", func(t *testing.T) {
		var sqlDB *sql.DB
		res, err := runSetup(t, harness.Config{Setup: []harness.Setup{harness.FuncDB(func(ctx context.Context, db *harness.SetupDB) error {
			var err error
			if sqlDB, err = db.SQL(); err != nil {
				return err
			}
			tx, err := sqlDB.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, usersSchema); err != nil {
				return err
			}
			return tx.Commit()
		})}})
		requireIdempotent(t, res, err)
		require.NotNil(t, sqlDB)
		assert.ErrorContains(t, sqlDB.PingContext(t.Context()), "database is closed")
	})
	t.Run("connection string", func(t *testing.T) {
		var after error
		var kept *harness.SetupDB
		res, err := runSetup(t, harness.Config{Setup: []harness.Setup{harness.FuncDB(func(ctx context.Context, db *harness.SetupDB) error {
			kept = db
			conn, err := pgx.Connect(ctx, db.ConnString())
			if err != nil {
				return err
			}
			defer conn.Close(ctx)
			var name string
			if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
				return err
			}
			if !strings.HasPrefix(name, "twice_") {
				return fmt.Errorf("ConnString leads to database %q, want the template", name)
			}
			_, err = conn.Exec(ctx, usersSchema)
			return err
		})}})
		requireIdempotent(t, res, err)
		_, after = kept.Pool(t.Context())
		assert.ErrorContains(t, after, "used after its setup func returned")
	})
	t.Run("connection left open", func(t *testing.T) {
		// A library that keeps a connection: the template must still clone.
		res, err := runSetup(t, harness.Config{Setup: []harness.Setup{harness.FuncDB(func(ctx context.Context, db *harness.SetupDB) error {
			conn, err := pgx.Connect(ctx, db.ConnString())
			if err != nil {
				return err
			}
			t.Cleanup(func() { conn.Close(context.Background()) })
			_, err = conn.Exec(ctx, usersSchema)
			return err
		})}})
		requireIdempotent(t, res, err)
	})
	t.Run("nil", func(t *testing.T) {
		_, err := runSetup(t, harness.Config{Setup: []harness.Setup{harness.FuncDB(nil)}})
		assert.Equal(t, "[twice] harness.FuncDB: the setup func is nil", blame.Message(err))
	})
}

// A setup step that never returns fails at the deadline, naming itself and
// what its sessions were doing, instead of hanging the test binary.
func TestSetupDeadline(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	tests := []struct {
		name string
		fn   func(ctx context.Context, db *harness.SetupDB) error
		want []string
		not  []string
	}{{
		name: "waits for its context",
		fn: func(ctx context.Context, db *harness.SetupDB) error {
			<-ctx.Done()
			return ctx.Err()
		},
		want: []string{"did not finish within 300ms (the setup deadline, harness.Config.SetupTimeout)", "(the step's connection): idle"},
		not:  []string{"abandoned"},
	}, {
		name: "waits on a lock another of its connections holds, ignoring its context",
		fn: func(ctx context.Context, db *harness.SetupDB) error {
			if _, err := db.Conn().Exec(ctx, "CREATE TABLE locked (x int)"); err != nil {
				return err
			}
			other, err := pgx.Connect(ctx, db.ConnString())
			if err != nil {
				return err
			}
			defer other.Close(context.Background())
			if _, err := other.Exec(ctx, "BEGIN; LOCK TABLE locked"); err != nil {
				return err
			}
			_, err = db.Conn().Exec(context.Background(), "SELECT * FROM locked")
			return err
		},
		want: []string{
			"did not finish within 300ms",
			"(the step's connection): active, waiting on Lock/relation, blocked by pid ",
			"; running: SELECT * FROM locked",
			": idle in transaction; last query: BEGIN; LOCK TABLE locked",
			"was abandoned: its goroutine may still be running",
		},
	}, {
		name: "ignores its context",
		fn: func(ctx context.Context, db *harness.SetupDB) error {
			<-release
			return nil
		},
		want: []string{"did not finish within 300ms", "(the step's connection): idle", "was abandoned"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runSetup(t, harness.Config{Setup: []harness.Setup{harness.SQL(usersSchema), harness.FuncDB(tt.fn)}, SetupTimeout: 300 * time.Millisecond})
			require.Error(t, err)
			msg := blame.Message(err)
			t.Log(msg)
			assert.True(t, strings.HasPrefix(msg, "[twice] setup step github.com/runtwice/twice/harness_test.TestSetupDeadline.func"), msg)
			for _, w := range tt.want {
				assert.Contains(t, msg, w)
			}
			for _, n := range tt.not {
				assert.NotContains(t, msg, n)
			}
		})
	}
}

// The directories through harness.Migrations: golang-migrate with
// down files and goose files apply up only, and the job sees the schema.
func TestMigrationsLayouts(t *testing.T) {
	for _, tt := range []struct {
		name string
		fsys fstest.MapFS
	}{{
		name: "golang-migrate",
		fsys: fstest.MapFS{
			"migrations/000001_users.up.sql":               {Data: []byte("CREATE TABLE users (id int PRIMARY KEY);")},
			"migrations/000001_users.down.sql":             {Data: []byte("DROP TABLE users;")},
			"migrations/000004_add_verify_emails.up.sql":   {Data: []byte("ALTER TABLE users ADD COLUMN is_email_verified bool NOT NULL DEFAULT false; INSERT INTO users VALUES (1);")},
			"migrations/000004_add_verify_emails.down.sql": {Data: []byte("ALTER TABLE users DROP COLUMN is_email_verified;")},
		},
	}, {
		name: "goose",
		fsys: fstest.MapFS{
			"migrations/2_verify.sql": {Data: []byte("-- +goose Up\nALTER TABLE users ADD COLUMN is_email_verified bool NOT NULL DEFAULT false;\nINSERT INTO users VALUES (1);\n-- +goose Down\nALTER TABLE users DROP COLUMN is_email_verified;\n")},
			"migrations/10_later.sql": {Data: []byte("-- +goose Up\n-- +goose StatementBegin\nCREATE FUNCTION n() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM users; $$;\n-- +goose StatementEnd\n-- +goose Down\nDROP FUNCTION n();\n")},
			"migrations/1_users.sql":  {Data: []byte("-- +goose Up\nCREATE TABLE users (id int PRIMARY KEY);\n-- +goose Down\nDROP TABLE users;\n")},
		},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			res, err := runSetup(t, harness.Config{Setup: []harness.Setup{harness.Migrations(tt.fsys, "migrations")}})
			requireIdempotent(t, res, err)
		})
	}
	t.Run("mixed", func(t *testing.T) {
		_, err := runSetup(t, harness.Config{Setup: []harness.Setup{harness.Migrations(fstest.MapFS{
			"m/1_a.up.sql": {Data: []byte("SELECT 1;")},
			"m/2_b.sql":    {Data: []byte("SELECT 2;")},
		}, "m")}})
		assert.Contains(t, blame.Message(err), `[twice] migrations in "m" mix layouts: 1_a.up.sql is golang-migrate (.up.sql name), but 2_b.sql has no migration tool's marker (plain SQL)`)
	})
}

// Every closure of one func literal has the same name: a table test whose
// setup closes over the case's value must still get that value's database,
// not the first case's template (issue 27).
func TestFuncSetupPerClosure(t *testing.T) {
	for _, start := range []int{120, 500} {
		t.Run(fmt.Sprint(start), func(t *testing.T) {
			var seen int
			job := harness.Job{Name: "read-points", Handler: func(ctx context.Context, d *harness.Delivery) error {
				return d.DB.QueryRow(ctx, `SELECT points FROM customers WHERE id = 1`).Scan(&seen)
			}}
			res, err := harness.Run(t.Context(), job, harness.Config{
				Faults:       []faults.Fault{faults.RunTwice()},
				ExpectNoWork: "it reads the points the setup wrote",
				Setup: []harness.Setup{harness.Func(func(ctx context.Context, conn *pgx.Conn) error {
					_, err := conn.Exec(ctx, fmt.Sprintf(`CREATE TABLE customers (id int PRIMARY KEY, points int NOT NULL); INSERT INTO customers VALUES (1, %d)`, start))
					return err
				})},
			})
			if res != nil {
				t.Cleanup(func() { res.DropDatabases(context.Background()) })
			}
			require.NoError(t, err)
			assert.Equal(t, start, seen, "points the handler read")
		})
	}
}

// One Setup value given to several checks is one func value: its template
// is built once and shared.
func TestFuncSetupShared(t *testing.T) {
	calls := 0
	setup := harness.Func(func(ctx context.Context, conn *pgx.Conn) error {
		calls++
		_, err := conn.Exec(ctx, usersSchema)
		return err
	})
	for range 2 {
		res, err := runSetup(t, harness.Config{Setup: []harness.Setup{setup}})
		requireIdempotent(t, res, err)
	}
	assert.Equal(t, 1, calls, "times the shared setup func ran")
}
