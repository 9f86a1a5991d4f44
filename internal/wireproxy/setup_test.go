package wireproxy_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runtwice/twice/internal/pgserver"
	"github.com/runtwice/twice/internal/wireproxy"
)

// newDatabase creates a database of this test's own (twice_wpt_<random>)
// with a small schema, and drops it when the test ends. It returns the
// database's direct connection string.
func newDatabase(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	srv, err := pgserver.Shared(ctx)
	if err != nil {
		if os.Getenv("TWICE_DATABASE_URL") == "" {
			t.Skipf("no PostgreSQL server (set TWICE_DATABASE_URL): %v", err)
		}
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	_, _ = rand.Read(buf)
	name := "twice_wpt_" + hex.EncodeToString(buf)
	admin, err := pgx.Connect(ctx, srv.ConnString(""))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		admin, err := pgx.Connect(ctx, srv.ConnString(""))
		if err != nil {
			t.Errorf("dropping %s: %v", name, err)
			return
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping %s: %v", name, err)
		}
	})
	dsn := srv.ConnString(name)
	direct := connect(t, dsn)
	if _, err := direct.Exec(ctx, `
		CREATE TABLE items (id int PRIMARY KEY, note text NOT NULL DEFAULT '');
		INSERT INTO items (id) VALUES (1);`); err != nil {
		t.Fatal(err)
	}
	return dsn
}

// connect opens a connection closed when the test ends.
func connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// recorder is a harness stand-in: it records every Before and After and
// answers Before with decide (Forward when nil).
type recorder struct {
	decide func(ctx context.Context, s wireproxy.Step) wireproxy.Action

	mu     sync.Mutex
	before []wireproxy.Step
	after  []afterCall
}

type afterCall struct {
	step wireproxy.Step
	err  error
}

func (r *recorder) hooks() wireproxy.Hooks {
	return wireproxy.Hooks{
		Before: func(ctx context.Context, s wireproxy.Step) wireproxy.Action {
			r.mu.Lock()
			r.before = append(r.before, s)
			r.mu.Unlock()
			if r.decide == nil {
				return wireproxy.Forward
			}
			return r.decide(ctx, s)
		},
		After: func(s wireproxy.Step, err error) {
			r.mu.Lock()
			r.after = append(r.after, afterCall{s, err})
			r.mu.Unlock()
		},
	}
}

func (r *recorder) steps() []wireproxy.Step {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]wireproxy.Step(nil), r.before...)
}

func (r *recorder) afters() []afterCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]afterCall(nil), r.after...)
}

// listen starts a proxy for dsn's database, closed when the test ends.
func listen(t testing.TB, label, dsn string, hooks wireproxy.Hooks) *wireproxy.Proxy {
	t.Helper()
	p, err := wireproxy.Listen(wireproxy.Config{Label: label, Upstream: dsn, Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

func count(t testing.TB, conn *pgx.Conn, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func pgCode(err error) string {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pgErr.Code
	}
	return ""
}
