package wireproxy_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/internal/wireproxy"
)

// holding is a harness stand-in that holds the commit of the steps whose
// SQL hold names and says when each has run.
type holding struct {
	recorder
	ran chan wireproxy.Step
}

func newHolding(hold func(wireproxy.Step) bool) *holding {
	h := &holding{ran: make(chan wireproxy.Step, 4)}
	h.decide = func(_ context.Context, s wireproxy.Step) wireproxy.Action {
		if hold(s) {
			return wireproxy.Hold
		}
		return wireproxy.Forward
	}
	return h
}

func (h *holding) hooks() wireproxy.Hooks {
	hooks := h.recorder.hooks()
	hooks.Held = func(s wireproxy.Step) { h.ran <- s }
	return hooks
}

// The race inside one statement: a held INSERT ... WHERE NOT EXISTS has
// run but not committed, so the same statement beside it sees no row and
// inserts too; the held client gets its own reply only after the commit.
// Every way a driver sends a statement is held alike.
func TestHoldOverlapsOneStatement(t *testing.T) {
	const insert = "INSERT INTO bounces (note) SELECT 'bounce' WHERE NOT EXISTS (SELECT FROM bounces WHERE note = 'bounce')"
	modes := []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := context.Background()
			dsn := newDatabase(t)
			direct := connect(t, dsn)
			if _, err := direct.Exec(ctx, "CREATE TABLE bounces (note text NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			h := newHolding(func(s wireproxy.Step) bool { return strings.HasPrefix(s.SQL, "INSERT") })
			p := listen(t, "d1", dsn, h.hooks())
			cfg := mustParse(t, p.DSN())
			cfg.DefaultQueryExecMode = mode
			c, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)

			var wg sync.WaitGroup
			var tag string
			var heldErr error
			replied := make(chan struct{})
			wg.Go(func() {
				defer close(replied)
				ct, err := c.Exec(ctx, insert)
				tag, heldErr = ct.String(), err
			})
			s := <-h.ran
			if s.CommitPoint != true || s.Unholdable != "" {
				t.Errorf("held step: CommitPoint %v, Unholdable %q; want a commit point that can be held", s.CommitPoint, s.Unholdable)
			}
			select {
			case <-replied:
				t.Fatal("the client had its reply before the commit")
			default:
			}
			if n := count(t, direct, "SELECT count(*) FROM bounces"); n != 0 {
				t.Errorf("the held insert is visible before its commit: %d rows", n)
			}
			if _, err := direct.Exec(ctx, insert); err != nil {
				t.Fatalf("the statement beside it: %v", err)
			}
			p.Commit()
			wg.Wait()
			if heldErr != nil || tag != "INSERT 0 1" {
				t.Fatalf("the held client got %q, %v; want INSERT 0 1", tag, heldErr)
			}
			if n := count(t, direct, "SELECT count(*) FROM bounces"); n != 2 {
				t.Errorf("both statements ran on snapshots before either committed, so both inserted: want 2 rows, got %d", n)
			}
			// The session is back outside a transaction: its next
			// statement is autocommit again and is given back clean.
			if n := count(t, c, "SELECT count(*) FROM bounces"); n != 2 {
				t.Errorf("the held session's next statement: %d rows, want 2", n)
			}
			var status string
			if err := c.QueryRow(ctx, "SELECT CASE WHEN pg_current_xact_id_if_assigned() IS NULL THEN 'none' ELSE 'open' END").Scan(&status); err != nil || status != "none" {
				t.Errorf("after the commit: transaction %q, %v; want none", status, err)
			}
			afters := h.afters()
			if len(afters) == 0 || afters[0].err != nil || !afters[0].step.CommitPoint {
				t.Errorf("After of the held step: %+v", afters)
			}
		})
	}
}

// With a unique constraint the statement beside the held one waits for
// its commit (a lock wait the server reports), then does nothing.
func TestHoldMakesTheOtherWait(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	direct := connect(t, dsn)
	h := newHolding(func(s wireproxy.Step) bool { return strings.HasPrefix(s.SQL, "INSERT") })
	p := listen(t, "d1", dsn, h.hooks())
	const insert = "INSERT INTO items (id, note) VALUES (50, 'once') ON CONFLICT DO NOTHING"
	held := execAsync(ctx, p.DSN(), insert)
	s := <-h.ran
	other := execAsync(ctx, dsn, insert)
	eventually(t, "the other statement to wait on the held one's lock", func() bool {
		var n int
		_ = direct.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", int(s.PID)).Scan(&n)
		return n == 1
	})
	p.Commit()
	for _, done := range []<-chan error{held, other} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, direct, "SELECT count(*) FROM items WHERE id = 50"); n != 1 {
		t.Errorf("rows = %d, want 1", n)
	}
}

// A statement that fails is not held: it rolls back at once and the
// client gets its error. One that cannot run in a transaction block is
// forwarded as it is, and the step says why it was not held.
func TestHoldLeavesAlone(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	h := newHolding(func(wireproxy.Step) bool { return true })
	p := listen(t, "d1", dsn, h.hooks())
	c := connect(t, p.DSN())
	if _, err := c.Exec(ctx, "INSERT INTO items (id) VALUES (1)"); pgCode(err) != "23505" {
		t.Errorf("a duplicate key under Hold: %v, want 23505", err)
	}
	if _, err := c.Exec(ctx, "VACUUM items"); err != nil {
		t.Errorf("VACUUM under Hold: %v", err)
	}
	if _, err := c.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "INSERT INTO items (id) VALUES (60)"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-h.ran:
		t.Errorf("Held called for %q", s.SQL)
	default:
	}
	want := map[string]string{
		"INSERT INTO items (id) VALUES (1)":  "",
		"VACUUM items":                       "VACUUM cannot run inside a transaction block",
		"BEGIN":                              "it begins or ends a transaction itself (BEGIN)",
		"INSERT INTO items (id) VALUES (60)": "it runs inside a transaction block, whose COMMIT is what commits it",
		"COMMIT":                             "it runs inside a transaction block, whose COMMIT is what commits it",
	}
	for _, s := range h.steps() {
		if w, ok := want[s.SQL]; ok && s.Unholdable != w {
			t.Errorf("%s: Unholdable %q, want %q", s.SQL, s.Unholdable, w)
		}
	}
	if n := count(t, connect(t, dsn), "SELECT count(*) FROM items WHERE id = 60"); n != 1 {
		t.Errorf("rows = %d, want 1", n)
	}
}

// A commit that fails (a deferred constraint) reaches the client as its
// statement's error, as in autocommit.
func TestHoldCommitError(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	direct := connect(t, dsn)
	if _, err := direct.Exec(ctx, `CREATE TABLE refs (item int REFERENCES items DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}
	h := newHolding(func(s wireproxy.Step) bool { return strings.HasPrefix(s.SQL, "INSERT") })
	p := listen(t, "d1", dsn, h.hooks())
	done := execAsync(ctx, p.DSN(), "INSERT INTO refs VALUES (999)")
	<-h.ran
	p.Commit()
	if err := <-done; pgCode(err) != "23503" {
		t.Errorf("the held insert whose commit fails: %v, want 23503", err)
	}
	if n := count(t, direct, "SELECT count(*) FROM refs"); n != 0 {
		t.Errorf("refs = %d, want 0", n)
	}
}
