package wireproxy_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/runtwice/twice/internal/wireproxy"
)

// What a handler leaves open when it returns is read from what the
// client was told (the last ReadyForQuery's transaction status, a round
// trip out), never from how far the proxy's relay has got: each case
// runs with the relay ten times slower than the grace Release used to
// give it, after its reply and after the client's Terminate.
func TestLeftOpenAtReturn(t *testing.T) {
	slow := 200 * time.Millisecond
	for _, tc := range []struct {
		name     string
		handler  func(t *testing.T, dsn string)
		leftOpen int
	}{
		{"a statement outside a transaction", func(t *testing.T, dsn string) {
			c := connect(t, dsn)
			exec(t, c, "INSERT INTO items (id) VALUES (90)")
		}, 0},
		{"a transaction committed", func(t *testing.T, dsn string) {
			c := connect(t, dsn)
			exec(t, c, "BEGIN")
			exec(t, c, "INSERT INTO items (id) VALUES (90)")
			exec(t, c, "COMMIT")
		}, 0},
		{"a connection closed right before the return", func(t *testing.T, dsn string) {
			c := connect(t, dsn)
			exec(t, c, "INSERT INTO items (id) VALUES (90)")
			if err := c.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
		}, 0},
		{"database/sql, a transaction committed", func(t *testing.T, dsn string) {
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			tx, err := db.BeginTx(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec("INSERT INTO items (id) VALUES (90)"); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}, 0},
		{"a transaction left open", func(t *testing.T, dsn string) {
			c := connect(t, dsn)
			exec(t, c, "BEGIN")
			exec(t, c, "INSERT INTO items (id) VALUES (90)")
		}, 1},
		{"a failed transaction left open", func(t *testing.T, dsn string) {
			c := connect(t, dsn)
			exec(t, c, "BEGIN")
			if _, err := c.Exec(context.Background(), "INSERT INTO nowhere VALUES (1)"); err == nil {
				t.Fatal("an insert into a missing table succeeded")
			}
		}, 1},
		{"a connection closed inside its transaction", func(t *testing.T, dsn string) {
			c := connect(t, dsn)
			exec(t, c, "BEGIN")
			exec(t, c, "INSERT INTO items (id) VALUES (90)")
			if err := c.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
		}, 1},
	} {
		for _, relay := range []string{"relay on time", "relay slow after the reply", "relay slow after a Terminate"} {
			t.Run(tc.name+"/"+relay, func(t *testing.T) {
				switch relay {
				case "relay slow after the reply":
					defer wireproxy.SlowRelay(slow)()
				case "relay slow after a Terminate":
					defer wireproxy.SlowRead('X', slow)()
				}
				dsn := newDatabase(t)
				b := newBackends(t)
				p := listenShared(t, "d1", dsn, b, wireproxy.Hooks{})
				tc.handler(t, p.DSN())
				p.HandlerReturned()
				if got := p.LeftOpen(); got != tc.leftOpen {
					t.Errorf("LeftOpen() = %d, want %d", got, tc.leftOpen)
				}
				p.Release()
				if got := p.LeftOpen(); got != tc.leftOpen {
					t.Errorf("after Release, LeftOpen() = %d, want %d", got, tc.leftOpen)
				}
				if tc.leftOpen > 0 {
					return
				}
				if s := b.Stats(); s.Opened != 1 || s.Idle != 1 {
					t.Errorf("after Release: %+v, want the backend kept", s)
				}
			})
		}
	}
}

// A session the client ends inside a transaction, by itself or through
// its pool (pgxpool closes a connection given back in one), counts the
// same whether it ended before the handler returned or after.
func TestClosedInTransactionCountsEitherSideOfTheReturn(t *testing.T) {
	for _, order := range []string{"ended before the return", "ended after the return"} {
		t.Run(order, func(t *testing.T) {
			ctx := context.Background()
			dsn := newDatabase(t)
			b := newBackends(t)
			p := listenShared(t, "d1", dsn, b, wireproxy.Hooks{})
			c := connect(t, p.DSN())
			exec(t, c, "BEGIN")
			exec(t, c, "INSERT INTO items (id) VALUES (90)")
			if order == "ended after the return" {
				p.HandlerReturned()
			}
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the session over", func() bool { return wireproxy.Conns(p) == 0 })
			p.HandlerReturned()
			if got := p.LeftOpen(); got != 1 {
				t.Errorf("LeftOpen() = %d, want 1", got)
			}
		})
	}
}
