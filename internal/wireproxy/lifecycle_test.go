package wireproxy_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/internal/wireproxy"
)

// Close ends a step held in Before (its context is done) and leaves no
// goroutine of the proxy behind.
func TestCloseReleasesHeldStep(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	held := make(chan struct{})
	p, err := wireproxy.Listen(wireproxy.Config{Label: "d1", Upstream: dsn, Hooks: wireproxy.Hooks{
		Before: func(ctx context.Context, s wireproxy.Step) wireproxy.Action {
			close(held)
			<-ctx.Done()
			return wireproxy.Forward
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, p.DSN())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, "INSERT INTO items (id) VALUES (60)")
		done <- err
	}()
	<-held
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Error("the held step succeeded after Close")
	}
	if n := count(t, connect(t, dsn), "SELECT count(*) FROM items WHERE id = 60"); n != 0 {
		t.Errorf("the held step reached the server: count = %d", n)
	}
	// Close waited for every goroutine; give those that were returning
	// from their last call a chance to finish.
	var left string
	for range 1000 {
		if left = proxyGoroutines(); left == "" {
			break
		}
		runtime.Gosched()
	}
	if left != "" {
		t.Errorf("goroutines of the proxy alive after Close:\n%s", left)
	}
}

func proxyGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "internal/wireproxy.(*") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

func TestUnixSocket(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	var rec recorder
	p, err := wireproxy.Listen(wireproxy.Config{Label: "d1", Upstream: dsn, Hooks: rec.hooks(), UnixSocket: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, p.DSN())
	if err != nil {
		t.Fatalf("pgx over %s: %v", p.DSN(), err)
	}
	if _, err := c.Exec(ctx, "INSERT INTO items (id) VALUES ($1)", 70); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	db, err := sql.Open("pgx", p.DSN())
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM items WHERE id = $1", 70).Scan(&n); err != nil || n != 1 {
		t.Errorf("database/sql over the unix socket: count = %d, err = %v; want 1", n, err)
	}
	db.Close()
	if got := len(rec.steps()); got != 2 {
		t.Errorf("%d steps, want 2", got)
	}
	dir := filepath.Dir(p.Addr())
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the socket directory %s is left after Close (stat: %v)", dir, err)
	}
}
