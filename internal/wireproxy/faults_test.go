package wireproxy_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/runtwice/twice/internal/wireproxy"
)

// execer is the little a handler in these tests needs from a driver.
type execer func(ctx context.Context, sql string, args ...any) error

// drivers open a connection through dsn the way each supported driver does.
var drivers = []struct {
	name string
	open func(t *testing.T, dsn string) execer
}{
	{"pgx", func(t *testing.T, dsn string) execer {
		c, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return func(ctx context.Context, sql string, args ...any) error {
			_, err := c.Exec(ctx, sql, args...)
			return err
		}
	}},
	{"database/sql", func(t *testing.T, dsn string) execer {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		db := stdlib.OpenDB(*cfg)
		t.Cleanup(func() { db.Close() })
		c, err := db.Conn(context.Background()) // one session, so BEGIN and COMMIT share it
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return func(ctx context.Context, sql string, args ...any) error {
			_, err := c.ExecContext(ctx, sql, args...)
			return err
		}
	}},
}

func TestCrashAtStep(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			ctx := context.Background()
			dsn := newDatabase(t)
			direct := connect(t, dsn)
			rec := recorder{decide: func(_ context.Context, s wireproxy.Step) wireproxy.Action {
				if s.Index == 4 {
					return wireproxy.Crash
				}
				return wireproxy.Forward
			}}
			p := listen(t, "d1", dsn, rec.hooks())
			exec := d.open(t, p.DSN())

			var errs []error
			for _, q := range []string{
				"INSERT INTO items (id) VALUES (10)", // autocommit: stays
				"BEGIN",
				"INSERT INTO items (id) VALUES (11)", // rolled back with the crash
				"INSERT INTO items (id) VALUES (12)", // step 4: never reaches the server
				"COMMIT",
			} {
				errs = append(errs, exec(ctx, q))
			}
			for i, err := range errs[:3] {
				if err != nil {
					t.Errorf("step %d: %v", i+1, err)
				}
			}
			if errs[3] == nil || errs[4] == nil {
				t.Errorf("the handler saw no error at or after the crash: step 4 err = %v, step 5 err = %v", errs[3], errs[4])
			}
			if got := len(rec.steps()); got != 4 {
				t.Errorf("Before called for %d steps, want 4 (none after the crash)", got)
			}
			if got := len(rec.afters()); got != 3 {
				t.Errorf("After called %d times, want 3 (not for the crashed step)", got)
			}
			if !errors.Is(p.Dead(), wireproxy.ErrDead) {
				t.Errorf("Dead() = %v, want ErrDead", p.Dead())
			}

			if n := count(t, direct, "SELECT count(*) FROM items WHERE id = 10"); n != 1 {
				t.Errorf("autocommitted row 10: count = %d, want 1", n)
			}
			if n := count(t, direct, "SELECT count(*) FROM items WHERE id IN (11, 12)"); n != 0 {
				t.Errorf("rows of the crashed transaction: count = %d, want 0", n)
			}
			// Were the crashed transaction committed, this would be a unique
			// violation; while it is open, it waits for it to end.
			if _, err := direct.Exec(ctx, "INSERT INTO items (id) VALUES (11)"); err != nil {
				t.Errorf("inserting row 11 after the crash: %v", err)
			}

			_, err := pgx.Connect(ctx, p.DSN())
			if err == nil || !strings.Contains(err.Error(), "[twice]") || !strings.Contains(err.Error(), "dead") {
				t.Errorf("connecting after the crash: err = %v, want a [twice] error saying the delivery is dead", err)
			}
		})
	}
}

// The server applies an ambiguous step and its reply is lost with its
// connection, as in a network failure; the delivery lives on and may
// connect again.
func TestAmbiguous(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stmts []string
		at    string // the step made ambiguous
	}{
		{"commit", []string{"BEGIN", "INSERT INTO items (id) VALUES (20)", "COMMIT"}, "COMMIT"},
		{"autocommit insert", []string{"INSERT INTO items (id) VALUES (20)"}, "INSERT INTO items (id) VALUES (20)"},
	} {
		for _, d := range drivers {
			t.Run(tc.name+" "+d.name, func(t *testing.T) {
				ctx := context.Background()
				dsn := newDatabase(t)
				direct := connect(t, dsn)
				rec := recorder{decide: func(_ context.Context, s wireproxy.Step) wireproxy.Action {
					if s.SQL == tc.at {
						if !s.CommitPoint {
							t.Errorf("step %q is no commit point", s.SQL)
						}
						return wireproxy.Ambiguous
					}
					return wireproxy.Forward
				}}
				p := listen(t, "d1", dsn, rec.hooks())
				exec := d.open(t, p.DSN())
				beside := connect(t, p.DSN())
				var last error
				for _, q := range tc.stmts {
					last = exec(ctx, q)
				}
				if last == nil {
					t.Error("the handler saw no error for the ambiguous step")
				}
				if n := count(t, direct, "SELECT count(*) FROM items WHERE id = 20"); n != 1 {
					t.Errorf("row 20 after the ambiguous step: count = %d, want 1 (applied)", n)
				}
				afters := rec.afters()
				if len(afters) != len(tc.stmts) || afters[len(afters)-1].err != nil {
					t.Errorf("After calls = %v, want one per step, the ambiguous one without error", afters)
				}
				// Only the connection is lost, as in a network failure: the
				// delivery lives on and reconnects.
				if dead := p.Dead(); dead != nil {
					t.Errorf("the delivery died with its connection: %v", dead)
				}
				if n := count(t, beside, "SELECT count(*) FROM items WHERE id = 20"); n != 1 {
					t.Errorf("row 20 seen on the delivery's other connection: count = %d, want 1", n)
				}
				again := connect(t, p.DSN())
				if n := count(t, again, "SELECT count(*) FROM items WHERE id = 20"); n != 1 {
					t.Errorf("row 20 seen on a new connection after the ambiguous step: count = %d, want 1", n)
				}
			})
		}
	}
}

// An ambiguous COPY FROM STDIN gets the client's data, is applied, and
// only its result is lost.
func TestAmbiguousCopyIn(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	direct := connect(t, dsn)
	rec := recorder{decide: func(context.Context, wireproxy.Step) wireproxy.Action { return wireproxy.Ambiguous }}
	p := listen(t, "d1", dsn, rec.hooks())
	c := connect(t, p.DSN())
	_, err := c.CopyFrom(ctx, pgx.Identifier{"items"}, []string{"id"}, pgx.CopyFromRows([][]any{{50}}))
	if err == nil {
		t.Error("CopyFrom through an ambiguous step succeeded")
	}
	if n := count(t, direct, "SELECT count(*) FROM items WHERE id = 50"); n != 1 {
		t.Errorf("row 50: count = %d, want 1", n)
	}
	if afters := rec.afters(); len(afters) != 1 || afters[0].err != nil {
		t.Errorf("After calls = %v, want one without error", afters)
	}

	// A client that waits for the server's CopyInResponse before it sends.
	p2 := listen(t, "d2", dsn, rec.hooks())
	fe := rawSession(t, p2.DSN())
	fe.Send(&pgproto3.Query{String: "COPY items (id) FROM STDIN"})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	receiveUntil[*pgproto3.CopyInResponse](t, fe)
	fe.Send(&pgproto3.CopyData{Data: []byte("51\n")})
	fe.Send(&pgproto3.CopyDone{})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	if msg, err := fe.Receive(); err == nil {
		t.Errorf("after the ambiguous COPY the client received %T, want the connection closed", msg)
	}
	if n := count(t, direct, "SELECT count(*) FROM items WHERE id = 51"); n != 1 {
		t.Errorf("row 51: count = %d, want 1", n)
	}
}

// rawSession opens a session through dsn and returns its protocol frontend.
func rawSession(t *testing.T, dsn string) *pgproto3.Frontend {
	t.Helper()
	pg, err := pgconn.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := pg.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Conn.Close() })
	return hc.Frontend
}

// A held step holds nothing else: not the delivery's other connections,
// not another delivery.
func TestHeldStep(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	direct := connect(t, dsn)
	held, release := make(chan struct{}), make(chan struct{})
	recA := recorder{decide: func(ctx context.Context, s wireproxy.Step) wireproxy.Action {
		if s.SQL == "INSERT INTO items (id) VALUES (30)" {
			close(held)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return wireproxy.Forward
	}}
	a := listen(t, "a", dsn, recA.hooks())
	var recB recorder
	b := listen(t, "b", dsn, recB.hooks())

	heldErr := execAsync(ctx, a.DSN(), "INSERT INTO items (id) VALUES (30)")
	<-held

	ca := connect(t, a.DSN())
	if n := count(t, ca, "SELECT count(*) FROM items WHERE id = 30"); n != 0 {
		t.Errorf("the held insert reached the server: count = %d", n)
	}
	cb := connect(t, b.DSN())
	if _, err := cb.Exec(ctx, "INSERT INTO items (id) VALUES (31)"); err != nil {
		t.Errorf("the other delivery: %v", err)
	}
	if n := count(t, direct, "SELECT count(*) FROM items WHERE id IN (30, 31)"); n != 1 {
		t.Errorf("while step 1 of a is held: count = %d, want 1 (b's row only)", n)
	}
	close(release)
	if err := <-heldErr; err != nil {
		t.Fatalf("the released step: %v", err)
	}
	if n := count(t, direct, "SELECT count(*) FROM items WHERE id = 30"); n != 1 {
		t.Errorf("after release: count = %d, want 1", n)
	}
	if got := len(recA.steps()); got != 2 {
		t.Errorf("delivery a: %d steps, want 2 (the held insert, the select beside it)", got)
	}
}

// execAsync runs sql on a connection of its own and reports how it ended.
func execAsync(ctx context.Context, dsn, sql string) <-chan error {
	done := make(chan error, 1)
	go func() {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			done <- err
			return
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, sql)
		done <- err
	}()
	return done
}

// A step waiting on a lock is in flight with its PID, and the server says
// who blocks it.
func TestLockWaitInFlight(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	holder := connect(t, dsn)
	observer := connect(t, dsn)
	var rec recorder
	p := listen(t, "d1", dsn, rec.hooks())

	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT * FROM items WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	done := execAsync(ctx, p.DSN(), "UPDATE items SET note = 'y' WHERE id = 1")

	var blocked wireproxy.Step
	var blockers []uint32
	for blockers == nil {
		select {
		case err := <-done:
			t.Fatalf("the update finished while the row was locked: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
		for _, s := range p.InFlight() {
			var pids []uint32
			if err := observer.QueryRow(ctx, "SELECT pg_blocking_pids($1)", s.PID).Scan(&pids); err != nil {
				t.Fatal(err)
			}
			if len(pids) > 0 {
				blocked, blockers = s, pids
			}
		}
	}
	if blocked.SQL != "UPDATE items SET note = 'y' WHERE id = 1" {
		t.Errorf("blocked step SQL = %q", blocked.SQL)
	}
	if want := holder.PgConn().PID(); len(blockers) != 1 || blockers[0] != want {
		t.Errorf("pg_blocking_pids = %v, want [%d]", blockers, want)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the update after the lock was released: %v", err)
	}
	if fl := p.InFlight(); len(fl) != 0 {
		t.Errorf("InFlight() = %v after the step finished", fl)
	}
}

func TestCancelRequest(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	observer := connect(t, dsn)
	var rec recorder
	p := listen(t, "d1", dsn, rec.hooks())
	cfg, err := pgx.ParseConfig(p.DSN())
	if err != nil {
		t.Fatal(err)
	}
	// Cancel with a CancelRequest only: a cut socket would prove nothing.
	cfg.BuildContextWatcherHandler = func(pg *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pg, DeadlineDelay: time.Hour}
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)

	qctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(qctx, "SELECT pg_sleep(60)")
		done <- err
	}()
	for {
		select {
		case err := <-done:
			t.Fatalf("pg_sleep ended before it was cancelled: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
		var active bool
		if err := observer.QueryRow(ctx, "SELECT count(*) > 0 FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND query LIKE 'SELECT pg_sleep%'", c.PgConn().PID()).Scan(&active); err != nil {
			t.Fatal(err)
		}
		if active {
			break
		}
	}
	cancel()
	err = <-done
	if code := pgCode(err); code != "57014" {
		t.Fatalf("cancelled pg_sleep: err = %v, want query_canceled (57014) from the server", err)
	}
	if n := count(t, c, "SELECT 1"); n != 1 {
		t.Errorf("the connection after the cancel: SELECT 1 = %d", n)
	}
	if afters := rec.afters(); len(afters) < 1 || pgCode(afters[0].err) != "57014" {
		t.Errorf("After calls = %v, want the first with query_canceled", afters)
	}
}

// Drivers that ask for encryption first get 'N' and go on in plain text.
func TestEncryptionRequestsDeclined(t *testing.T) {
	dsn := newDatabase(t)
	p := listen(t, "d1", dsn, wireproxy.Hooks{})
	for _, tc := range []struct {
		name string
		code uint32
	}{{"SSLRequest", 80877103}, {"GSSENCRequest", 80877104}} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			req := []byte{0, 0, 0, 8, byte(tc.code >> 24), byte(tc.code >> 16), byte(tc.code >> 8), byte(tc.code)}
			if _, err := nc.Write(req); err != nil {
				t.Fatal(err)
			}
			answer := make([]byte, 1)
			if _, err := nc.Read(answer); err != nil {
				t.Fatal(err)
			}
			if answer[0] != 'N' {
				t.Fatalf("answer = %q, want 'N'", answer)
			}
			// The session goes on over the same socket.
			fe := pgproto3.NewFrontend(nc, nc)
			cfg, err := pgconn.ParseConfig(dsn)
			if err != nil {
				t.Fatal(err)
			}
			fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
				Parameters: map[string]string{"user": cfg.User, "database": cfg.Database}})
			if err := fe.Flush(); err != nil {
				t.Fatal(err)
			}
			receiveUntil[*pgproto3.ReadyForQuery](t, fe)
		})
	}
}

// A client that executes before it syncs (Execute, Flush, then Sync) opens
// a step at the Flush; the Sync closes it.
func TestExecuteBeforeSync(t *testing.T) {
	dsn := newDatabase(t)
	var rec recorder
	p := listen(t, "d1", dsn, rec.hooks())
	fe := rawSession(t, p.DSN())
	fe.Send(&pgproto3.Parse{Query: "INSERT INTO items (id) VALUES (40)"})
	fe.Send(&pgproto3.Bind{})
	fe.Send(&pgproto3.Execute{})
	fe.Send(&pgproto3.Flush{})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	receiveUntil[*pgproto3.CommandComplete](t, fe)
	fe.Send(&pgproto3.Sync{})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	receiveUntil[*pgproto3.ReadyForQuery](t, fe)
	steps := rec.steps()
	if len(steps) != 1 || !steps[0].CommitPoint {
		t.Errorf("steps = %+v, want one commit point", steps)
	}
	if a := rec.afters(); len(a) != 1 {
		t.Errorf("After called %d times, want once, after the Sync", len(a))
	}
}

func receiveUntil[M pgproto3.BackendMessage](t *testing.T, fe *pgproto3.Frontend) {
	t.Helper()
	for {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		if e, ok := msg.(*pgproto3.ErrorResponse); ok {
			t.Fatalf("server error: %s", e.Message)
		}
		if _, ok := msg.(M); ok {
			return
		}
	}
}

// Kill cuts a delivery at once: open sessions fail, new ones are refused.
func TestKill(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	p := listen(t, "d1", dsn, wireproxy.Hooks{})
	db := stdlib.OpenDB(*mustParse(t, p.DSN()))
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	pids := p.PIDs()
	p.Kill()
	if _, err := db.ExecContext(ctx, "SELECT 1"); err == nil {
		t.Error("a statement after Kill succeeded")
	}
	if len(pids) != 1 {
		t.Errorf("PIDs() = %v, want one backend", pids)
	}
}

// A connection refused because the delivery is dead is reported to
// Hooks.Refused, so the harness can tell a handler that keeps reconnecting
// to a database it cannot reach; a live delivery's connections are not.
func TestRefusedHook(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	refused := make(chan error, 10)
	p := listen(t, "d1", dsn, wireproxy.Hooks{Refused: func(why error) { refused <- why }})
	c, err := pgx.Connect(ctx, p.DSN())
	if err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	if len(refused) != 0 {
		t.Fatalf("Refused was called for a live delivery: %v", <-refused)
	}
	p.Kill()
	for range 2 {
		if _, err := pgx.Connect(ctx, p.DSN()); err == nil {
			t.Fatal("a connection after Kill succeeded")
		}
	}
	if len(refused) != 2 {
		t.Fatalf("Refused called %d times for 2 refused connections, want 2", len(refused))
	}
	if why := <-refused; !errors.Is(why, wireproxy.ErrDead) {
		t.Errorf("Refused(%v), want an error wrapping ErrDead", why)
	}
}

func mustParse(t *testing.T, dsn string) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
