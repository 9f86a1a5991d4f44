package wireproxy_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx" for database/sql

	"github.com/runtwice/twice/internal/wireproxy"
)

// listenShared starts a proxy that keeps backends in b, closed when the
// test ends.
func listenShared(t *testing.T, label, dsn string, b *wireproxy.Backends, hooks wireproxy.Hooks) *wireproxy.Proxy {
	t.Helper()
	p, err := wireproxy.Listen(wireproxy.Config{Label: label, Upstream: dsn, Hooks: hooks, Backends: b})
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

func newBackends(t *testing.T) *wireproxy.Backends {
	t.Helper()
	b := wireproxy.NewBackends()
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func backendPID(t *testing.T, c *pgx.Conn) uint32 {
	t.Helper()
	var pid uint32
	if err := c.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// eventually waits until cond holds, for something that happens on
// another goroutine right after the call that causes it; it fails the test
// if it never does.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 2000 {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s never happened", what)
}

func exec(t *testing.T, c *pgx.Conn, sql string) {
	t.Helper()
	if _, err := c.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// A delivery that ends cleanly leaves its backend to the next one, with no
// session state of its own left on it; the steps of the next one carry the
// backend's PID.
func TestBackendReusedWithoutSessionState(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	direct := connect(t, dsn)
	var workMem string
	if err := direct.QueryRow(ctx, "SHOW work_mem").Scan(&workMem); err != nil {
		t.Fatal(err)
	}
	b := newBackends(t)

	p1 := listenShared(t, "d1", dsn, b, wireproxy.Hooks{})
	c1, err := pgx.Connect(ctx, p1.DSN())
	if err != nil {
		t.Fatal(err)
	}
	pid := backendPID(t, c1)
	for _, sql := range []string{
		"SET work_mem = '7777kB'",
		"SET application_name = 'first'",
		"PREPARE twice_left AS SELECT 1",
		"CREATE TEMP TABLE scratch (x int)",
		"SELECT pg_advisory_lock(4242)",
		"LISTEN twice_channel",
		"DECLARE kept CURSOR WITH HOLD FOR SELECT 1",
	} {
		exec(t, c1, sql)
	}
	p1.Release() // as the harness ends a delivery that returned
	if s := b.Stats(); s.Idle != 1 || s.Kept != 1 {
		t.Fatalf("after Release: %+v, want the backend kept", s)
	}

	var rec recorder
	p2 := listenShared(t, "d2", dsn, b, rec.hooks())
	c2 := connect(t, p2.DSN())
	if got := backendPID(t, c2); got != pid {
		t.Fatalf("the second delivery got backend %d, want the first's %d", got, pid)
	}
	if got := c2.PgConn().ParameterStatus("application_name"); got != "" {
		t.Errorf("the second delivery was told application_name = %q, want the startup's \"\"", got)
	}
	checks := []struct{ sql, want string }{
		{"SHOW work_mem", workMem},
		{"SHOW application_name", ""},
		{"SELECT count(*)::text FROM pg_prepared_statements WHERE name = 'twice_left'", "0"},
		{"SELECT count(*)::text FROM pg_cursors WHERE name = 'kept'", "0"},
		{"SELECT coalesce(to_regclass('pg_temp.scratch')::text, 'none')", "none"},
		{"SELECT count(*)::text FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()", "0"},
		{"SELECT count(*)::text FROM pg_listening_channels()", "0"},
	}
	for _, ch := range checks {
		var got string
		if err := c2.QueryRow(ctx, ch.sql).Scan(&got); err != nil {
			t.Fatalf("%s: %v", ch.sql, err)
		}
		if got != ch.want {
			t.Errorf("on the kept backend, %s = %q, want %q", ch.sql, got, ch.want)
		}
	}
	var locked bool
	if err := direct.QueryRow(ctx, "SELECT pg_try_advisory_lock(4242)").Scan(&locked); err != nil || !locked {
		t.Errorf("the first delivery's advisory lock is still held: pg_try_advisory_lock = %v, %v", locked, err)
	}
	for _, s := range rec.steps() {
		if s.PID != pid {
			t.Errorf("step %d %q has PID %d, want the kept backend's %d", s.Index, s.SQL, s.PID, pid)
		}
	}
	if got := p2.PIDs(); !slices.Equal(got, []uint32{pid}) {
		t.Errorf("p2.PIDs() = %v, want [%d]", got, pid)
	}

	// A client that says goodbye gives its backend back too.
	if err := c2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the backend of a closed client kept", func() bool { return b.Stats().Idle == 1 })
	c3 := connect(t, p2.DSN())
	if got := backendPID(t, c3); got != pid {
		t.Errorf("after a clean close the next connection got backend %d, want %d", got, pid)
	}
	if s := b.Stats(); s.Opened != 1 || s.Reused != 2 {
		t.Errorf("Stats = %+v, want 1 opened and 2 reused", s)
	}
}

// A killed delivery's backend, and one that crashed at a step, between
// round trips, is left as a crashed worker's session would leave the
// server: its transaction rolled back, its row and advisory locks gone,
// by the time TakeCut returns; it is then kept for the next delivery
// with its session reset. The backend of a connection left inside a
// transaction when the delivery is released ends, and is never handed
// out again.
func TestBackendOfDeadDeliveryIsTerminated(t *testing.T) {
	for _, end := range []string{"kill", "crash at a step", "release in a transaction"} {
		t.Run(end, func(t *testing.T) {
			ctx := context.Background()
			dsn := newDatabase(t)
			direct := connect(t, dsn)
			b := newBackends(t)
			rec := recorder{decide: func(_ context.Context, s wireproxy.Step) wireproxy.Action {
				if strings.Contains(s.SQL, "twice_crash") {
					return wireproxy.Crash
				}
				return wireproxy.Forward
			}}
			p1 := listenShared(t, "d1", dsn, b, rec.hooks())
			c1, err := pgx.Connect(ctx, p1.DSN())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c1.Close(ctx) })
			pid := backendPID(t, c1)
			exec(t, c1, "SELECT pg_advisory_lock(77)")
			exec(t, c1, "BEGIN")
			exec(t, c1, "INSERT INTO items (id) VALUES (90)")
			exec(t, c1, "SELECT * FROM items WHERE id = 1 FOR UPDATE")
			switch end {
			case "kill":
				// The client has its reply before the proxy's relay loops
				// back to wait for the next message: kill between round
				// trips, as the case means, not in that gap.
				eventually(t, "the connection between round trips", func() bool { return wireproxy.AllParked(p1) })
				p1.Kill()
			case "crash at a step":
				if _, err := c1.Exec(ctx, "SELECT 'twice_crash'"); err == nil {
					t.Fatal("the step the delivery crashed at succeeded")
				}
				// The executor kills a delivery that crashed at a step,
				// and TakeCut then waits for the rollback the crash
				// started: the client has its error before that ends.
				p1.Kill()
			default:
				p1.Release()
			}
			kept := end != "release in a transaction"
			if cut := p1.TakeCut(); kept && len(cut) != 0 {
				t.Errorf("TakeCut = %v, want none: the backend was between round trips", cut)
			}
			if !kept {
				eventually(t, "the backend gone from pg_stat_activity", func() bool {
					return count(t, direct, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)) == 0
				})
			}
			if n := count(t, direct, "SELECT count(*) FROM items WHERE id = 90"); n != 0 {
				t.Errorf("the dead delivery's open transaction committed: count = %d", n)
			}
			var locked bool
			if err := direct.QueryRow(ctx, "SELECT pg_try_advisory_lock(77)").Scan(&locked); err != nil || !locked {
				t.Errorf("the dead delivery's advisory lock is still held: %v, %v", locked, err)
			}
			if _, err := direct.Exec(ctx, "SELECT * FROM items WHERE id = 1 FOR UPDATE NOWAIT"); err != nil {
				t.Errorf("the dead delivery's row lock is still held: %v", err)
			}
			p2 := listenShared(t, "d2", dsn, b, wireproxy.Hooks{})
			if !kept {
				if s := b.Stats(); s.Kept != 0 || s.Idle != 0 {
					t.Errorf("Stats = %+v, want nothing kept", s)
				}
				if got := backendPID(t, connect(t, p2.DSN())); got == pid {
					t.Errorf("the next delivery got the dead one's backend %d", pid)
				}
				return
			}
			if s := b.Stats(); s.Kept != 1 || s.Idle != 1 {
				t.Errorf("Stats = %+v, want the rolled-back backend kept", s)
			}
			c2 := connect(t, p2.DSN())
			if got := backendPID(t, c2); got != pid {
				t.Errorf("the next delivery got backend %d, want the rolled-back %d", got, pid)
			}
			var inTx bool
			if err := c2.QueryRow(ctx, "SELECT pg_current_xact_id_if_assigned() IS NOT NULL OR count(*) > 0 FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'").Scan(&inTx); err != nil || inTx {
				t.Errorf("the kept backend holds what the dead delivery had: %v, %v", inTx, err)
			}
		})
	}
}

// A step whose reply is lost (Ambiguous) cuts only the client's side of
// its connection: the server had answered in full, so the backend is
// rolled back as the server rolls back a session whose client went away
// (an open transaction ends, its row and advisory locks go), reset, and
// kept for the next connection, never terminated. The delivery lives
// on; what the statement applied outside a transaction stays.
func TestLostReplyKeepsTheBackend(t *testing.T) {
	for _, tc := range []struct {
		name     string
		before   []string
		lost     string
		rowAfter int // rows with id 91 once the reply is lost
	}{
		{"autocommit", nil, "INSERT INTO items (id) VALUES (91)", 1},
		{"commit", []string{"BEGIN", "INSERT INTO items (id) VALUES (91)"}, "COMMIT", 1},
		{"in a transaction", []string{"BEGIN", "SELECT * FROM items WHERE id = 1 FOR UPDATE"}, "INSERT INTO items (id) VALUES (91)", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dsn := newDatabase(t)
			direct := connect(t, dsn)
			b := newBackends(t)
			rec := recorder{decide: func(_ context.Context, s wireproxy.Step) wireproxy.Action {
				if s.SQL == tc.lost {
					return wireproxy.Ambiguous
				}
				return wireproxy.Forward
			}}
			p := listenShared(t, "d1", dsn, b, rec.hooks())
			c1, err := pgx.Connect(ctx, p.DSN())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c1.Close(ctx) })
			pid := backendPID(t, c1)
			exec(t, c1, "SELECT pg_advisory_lock(78)")
			for _, sql := range tc.before {
				exec(t, c1, sql)
			}
			if _, err := c1.Exec(ctx, tc.lost); err == nil {
				t.Fatal("the client got the reply the proxy was to lose")
			}
			eventually(t, "the backend kept", func() bool { return b.Stats().Kept == 1 })
			if dead := p.Dead(); dead != nil {
				t.Errorf("the delivery died with its connection: %v", dead)
			}
			if n := count(t, direct, "SELECT count(*) FROM items WHERE id = 91"); n != tc.rowAfter {
				t.Errorf("rows with id 91 after the lost reply: %d, want %d", n, tc.rowAfter)
			}
			var locked bool
			if err := direct.QueryRow(ctx, "SELECT pg_try_advisory_lock(78)").Scan(&locked); err != nil || !locked {
				t.Errorf("the lost connection's advisory lock is still held: %v, %v", locked, err)
			}
			if _, err := direct.Exec(ctx, "SELECT * FROM items WHERE id = 1 FOR UPDATE NOWAIT"); err != nil {
				t.Errorf("the lost connection's row lock is still held: %v", err)
			}
			c2 := connect(t, p.DSN())
			if got := backendPID(t, c2); got != pid {
				t.Errorf("the delivery's next connection got backend %d, want the kept %d", got, pid)
			}
			if s := b.Stats(); s.Opened != 1 || s.Reused != 1 {
				t.Errorf("Stats = %+v, want 1 opened and 1 reused", s)
			}
			if cut := p.TakeCut(); len(cut) != 0 {
				t.Errorf("TakeCut = %v, want none: nothing was cut on the server's side", cut)
			}
		})
	}
}

// A client whose reply was lost sends a CancelRequest as it closes (pgx
// does, in asyncClose); it must never reach the next user of the kept
// backend, whose statement would fail with "canceling statement due to
// user request" (seen in a check's exploration on PostgreSQL 16).
func TestLostReplyCancelMissesTheNextUser(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	b := newBackends(t)
	rec := recorder{decide: func(_ context.Context, s wireproxy.Step) wireproxy.Action {
		if strings.Contains(s.SQL, "twice_lost") {
			return wireproxy.Ambiguous
		}
		return wireproxy.Forward
	}}
	p := listenShared(t, "d1", dsn, b, rec.hooks())
	for i := range 30 {
		c1, err := pgx.Connect(ctx, p.DSN())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c1.Exec(ctx, "SELECT 'twice_lost'"); err == nil {
			t.Fatal("the client got the reply the proxy was to lose")
		}
		// What pgx's asyncClose sends, sent again once the backend may
		// have been handed on.
		go func() { _ = c1.PgConn().CancelRequest(ctx) }()
		c2 := connect(t, p.DSN())
		if _, err := c2.Exec(ctx, "SELECT pg_sleep(0.05)"); err != nil {
			t.Fatalf("round %d: the next connection's statement failed: %v", i, err)
		}
		if err := c2.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Connections open at the same time, of one delivery or of two, never
// share a backend, and kept backends are handed out one to a connection.
func TestConcurrentConnectionsNeverShareBackend(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	b := newBackends(t)
	p1 := listenShared(t, "d1", dsn, b, wireproxy.Hooks{})
	p2 := listenShared(t, "d2", dsn, b, wireproxy.Hooks{})
	const n = 6
	round := func() []uint32 {
		conns := make([]*pgx.Conn, n)
		pids := make([]uint32, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				p := p1
				if i%2 == 1 {
					p = p2
				}
				c, err := pgx.Connect(ctx, p.DSN())
				if err != nil {
					errs[i] = err
					return
				}
				conns[i] = c
				// Inside a transaction, so the connection stays bound until
				// every one has asked.
				if _, err := c.Exec(ctx, "BEGIN"); err != nil {
					errs[i] = err
					return
				}
				errs[i] = c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pids[i])
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		for _, c := range conns {
			if _, err := c.Exec(ctx, "COMMIT"); err != nil {
				t.Fatal(err)
			}
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return pids
	}
	first := round()
	if distinct := len(slices.Compact(slices.Sorted(slices.Values(first)))); distinct != n {
		t.Fatalf("%d connections open at once had %d backends: %v", n, distinct, first)
	}
	eventually(t, "every backend kept", func() bool { return b.Stats().Idle == n })
	second := round()
	if distinct := len(slices.Compact(slices.Sorted(slices.Values(second)))); distinct != n {
		t.Fatalf("%d connections open at once on kept backends had %d backends: %v", n, distinct, second)
	}
	for _, pid := range second {
		if !slices.Contains(first, pid) {
			t.Errorf("backend %d of the second round was not kept from the first %v", pid, first)
		}
	}
	if s := b.Stats(); s.Opened != n || s.Reused != n {
		t.Errorf("Stats = %+v, want %d opened and %d reused", s, n, n)
	}
}

// Backends are kept per startup: a client that asks for other runtime
// parameters gets a backend of its own, and each sees what it asked for.
func TestBackendsKeptPerStartupParameters(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	b := newBackends(t)
	p1 := listenShared(t, "d1", dsn, b, wireproxy.Hooks{})
	alpha, err := pgx.Connect(ctx, p1.DSN()+"&application_name=alpha")
	if err != nil {
		t.Fatal(err)
	}
	alphaPID := backendPID(t, alpha)
	p1.Release()

	p2 := listenShared(t, "d2", dsn, b, wireproxy.Hooks{})
	plain := connect(t, p2.DSN())
	if got := backendPID(t, plain); got == alphaPID {
		t.Errorf("a client without application_name got the backend started for application_name=alpha")
	}
	var name string
	if err := plain.QueryRow(ctx, "SHOW application_name").Scan(&name); err != nil || name != "" {
		t.Errorf("SHOW application_name = %q, %v; want \"\"", name, err)
	}
	again := connect(t, p2.DSN()+"&application_name=alpha")
	if got := backendPID(t, again); got != alphaPID {
		t.Errorf("a client with application_name=alpha got backend %d, want the kept %d", got, alphaPID)
	}
	if err := again.QueryRow(ctx, "SHOW application_name").Scan(&name); err != nil || name != "alpha" {
		t.Errorf("SHOW application_name = %q, %v; want alpha", name, err)
	}
}

// A cancel request through the proxy reaches the right backend when the
// backend was kept from an earlier delivery.
func TestCancelOnKeptBackend(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	b := newBackends(t)
	p1 := listenShared(t, "d1", dsn, b, wireproxy.Hooks{})
	c1, err := pgx.Connect(ctx, p1.DSN())
	if err != nil {
		t.Fatal(err)
	}
	pid := backendPID(t, c1)
	p1.Release()
	p2 := listenShared(t, "d2", dsn, b, wireproxy.Hooks{})
	cfg, err := pgx.ParseConfig(p2.DSN())
	if err != nil {
		t.Fatal(err)
	}
	// Cancel with a CancelRequest only: a cut socket would prove nothing.
	cfg.BuildContextWatcherHandler = func(pg *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pg, DeadlineDelay: time.Hour}
	}
	c2, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close(ctx)
	if got := backendPID(t, c2); got != pid {
		t.Fatalf("got backend %d, want the kept %d", got, pid)
	}
	observer := connect(t, dsn)
	qctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c2.Exec(qctx, "SELECT pg_sleep(60)")
		done <- err
	}()
	eventually(t, "pg_sleep running", func() bool {
		return count(t, observer, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND query LIKE 'SELECT pg_sleep%'", int32(pid)) == 1
	})
	cancel()
	err = <-done
	if code := pgCode(err); code != "57014" {
		t.Errorf("a cancelled pg_sleep on a kept backend: %v (code %q), want query_canceled 57014", err, code)
	}
}

// database/sql over pgx's stdlib works on kept backends, its pool's
// connections closing cleanly and opening again.
func TestDatabaseSQLOnKeptBackends(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	b := newBackends(t)
	for i, label := range []string{"d1", "d2", "d3"} {
		p := listenShared(t, label, dsn, b, wireproxy.Hooks{})
		db, err := sql.Open("pgx", p.DSN())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO items (id) VALUES ($1)", 100+i); err != nil {
			t.Fatalf("%s: %v", label, err)
		}
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM items WHERE id >= 100").Scan(&n); err != nil || n != i+1 {
			t.Fatalf("%s: count = %d, %v; want %d", label, n, err, i+1)
		}
		p.Release() // as the harness does, before the handle is closed
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if s := b.Stats(); s.Opened != 1 || s.Reused != 2 {
		t.Errorf("Stats = %+v, want 1 opened and 2 reused", s)
	}
}
