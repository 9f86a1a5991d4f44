package wireproxy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runtwice/twice/internal/wireproxy"
)

// BenchmarkProxyOverhead runs the same 200 statements straight to the
// server and through proxies whose hooks let every step through, in the
// same iterations, the legs taking turns every 10 statements (rotating who
// goes first), and reports each per statement and the proxies' ratios: of
// the totals, and the median of the iterations' own ratios (-p50), which a
// burst of load on a shared machine moves less.
//
// Every leg reaches the server the same way direct does, on the server's
// unix socket (pgserver's local server listens on nothing else), so a
// ratio is what the hop to the proxy and the proxy's work cost. The legs:
//   - tcp: the client on the proxy's loopback TCP port (what a handler's
//     own DSN reaches in the harness);
//   - unix: the client on the proxy's unix socket;
//   - pipe: the client dialled in the process ([Proxy.Dial]), no socket
//     between client and proxy;
//   - relay: a bare relay, the floor of any proxy on a unix socket: a unix
//     socket whose bytes are copied to the server's and back (io.Copy each
//     way) with nothing parsed, so unix/relay is what the proxy's own work
//     costs over the extra hop;
//   - piperelay: the same bare relay behind the in-process pipe Dial
//     uses, the floor of the pipe leg (pipe/piperelay is the proxy's own
//     work).
func BenchmarkProxyOverhead(b *testing.B) {
	const (
		stmts = 200
		// chunk statements run on one leg before the next leg's turn, so
		// the legs of an iteration run within milliseconds of each other
		// and a burst of load on the machine falls on all of them alike.
		chunk = 10
	)
	handlers := []struct {
		name string
		tx   bool // the statements run in a transaction, begun and rolled back around them
		stmt func(ctx context.Context, q querier, id int) error
	}{
		{"select", false, func(ctx context.Context, q querier, id int) error {
			var n int
			return q.QueryRow(ctx, "SELECT $1::int", id).Scan(&n)
		}},
		{"insert-tx", true, func(ctx context.Context, q querier, id int) error {
			// Rolled back (the same cost as COMMIT here, and the table
			// stays small); each leg inserts ids of its own, as the legs'
			// transactions are open at once.
			_, err := q.Exec(ctx, "INSERT INTO items (id, note) VALUES ($1, 'x')", id)
			return err
		}},
	}
	dsn := newDatabase(b)
	var steps atomic.Int64
	hooks := wireproxy.Hooks{
		Before: func(context.Context, wireproxy.Step) wireproxy.Action { steps.Add(1); return wireproxy.Forward },
		After:  func(wireproxy.Step, error) {},
	}
	overTCP := listen(b, "bench-tcp", dsn, hooks)
	overUnix, err := wireproxy.Listen(wireproxy.Config{Label: "bench-unix", Upstream: dsn, Hooks: hooks, UnixSocket: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { overUnix.Close() })
	overPipe := listen(b, "bench-pipe", dsn, hooks)
	ctx := context.Background()
	legs := []struct {
		name string
		conn *pgx.Conn
	}{
		{"direct", connect(b, dsn)},
		{"tcp", connect(b, overTCP.DSN())},
		{"unix", connect(b, overUnix.DSN())},
		{"pipe", dialConn(b, overPipe.DSN(), func(ctx context.Context, _, _ string) (net.Conn, error) { return overPipe.Dial(ctx) })},
		{"relay", relayConn(b, dsn)},
		{"piperelay", pipeRelayConn(b, dsn)},
	}
	ratios := [][2]string{{"tcp", "direct"}, {"unix", "direct"}, {"pipe", "direct"}, {"relay", "direct"}, {"piperelay", "direct"}, {"unix", "relay"}, {"pipe", "piperelay"},
		{"pipe", "tcp"}} // the delivery's pools dialled the proxy's TCP port before Proxy.Dial
	index := func(name string) int {
		return slices.IndexFunc(legs, func(l struct {
			name string
			conn *pgx.Conn
		}) bool {
			return l.name == name
		})
	}
	for _, h := range handlers {
		b.Run(h.name, func(b *testing.B) {
			took := make([]time.Duration, len(legs))
			perIter := make([][]float64, len(ratios))
			body := stmts
			if h.tx {
				body = stmts - 2 // BEGIN and ROLLBACK are statements too
			}
			for i := 0; b.Loop(); i++ {
				this := make([]time.Duration, len(legs))
				timed := func(k int, f func() error) {
					start := time.Now()
					if err := f(); err != nil {
						b.Fatalf("%s: %v", legs[k].name, err)
					}
					this[k] += time.Since(start)
				}
				qs := make([]querier, len(legs))
				txs := make([]pgx.Tx, len(legs))
				for j := range legs {
					k := (j + i) % len(legs) // rotate who goes first
					qs[k] = legs[k].conn
					if h.tx {
						timed(k, func() (err error) { txs[k], err = legs[k].conn.Begin(ctx); qs[k] = txs[k]; return err })
					}
				}
				for from := 0; from < body; from += chunk {
					for j := range legs {
						k := (j + i + from/chunk) % len(legs)
						timed(k, func() error {
							for s := from; s < min(from+chunk, body); s++ {
								if err := h.stmt(ctx, qs[k], 1000*(k+1)+s); err != nil {
									return err
								}
							}
							return nil
						})
					}
				}
				for j := range legs {
					if k := (j + i) % len(legs); h.tx {
						timed(k, func() error { return txs[k].Rollback(ctx) })
					}
				}
				for k := range legs {
					took[k] += this[k]
				}
				for r, pair := range ratios {
					perIter[r] = append(perIter[r], float64(this[index(pair[0])])/float64(this[index(pair[1])]))
				}
			}
			n := float64(b.N * stmts)
			for k, l := range legs {
				b.ReportMetric(float64(took[k].Nanoseconds())/n, l.name+"-ns/stmt")
			}
			for r, pair := range ratios {
				name := pair[0] + "/" + pair[1]
				b.ReportMetric(float64(took[index(pair[0])])/float64(took[index(pair[1])]), name)
				b.ReportMetric(median(perIter[r]), name+"-p50")
			}
		})
	}
	if steps.Load() == 0 {
		b.Fatal("no step went through the proxy")
	}
}

// dialConn connects with dsn's settings through dial.
func dialConn(b *testing.B, dsn string, dial pgconn.DialFunc) *pgx.Conn {
	b.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.DialFunc = dial
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// pipeRelayConn connects to the server of dsn through a bare relay behind
// the in-process pipe Dial uses: the pipe's far end is copied to the
// server's socket and back, unparsed.
func pipeRelayConn(b *testing.B, dsn string) *pgx.Conn {
	b.Helper()
	upstream := serverSocket(b, dsn)
	var wg sync.WaitGroup
	b.Cleanup(wg.Wait)
	return dialConn(b, dsn, func(ctx context.Context, _, _ string) (net.Conn, error) {
		server, err := (&net.Dialer{}).DialContext(ctx, "unix", upstream)
		if err != nil {
			return nil, err
		}
		client, far := wireproxy.NewPipe()
		wg.Go(func() { _, _ = io.Copy(server, far); server.Close() })
		wg.Go(func() { _, _ = io.Copy(far, server); far.Close() })
		return client, nil
	})
}

// serverSocket is the path of the unix socket dsn names.
func serverSocket(b *testing.B, dsn string) string {
	b.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	if !strings.HasPrefix(cfg.Host, "/") {
		b.Skipf("the relays need the server on a unix socket, not %s", cfg.Host)
	}
	return filepath.Join(cfg.Host, fmt.Sprintf(".s.PGSQL.%d", cfg.Port))
}

// querier runs statements on a connection or in its transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// relayConn connects to the server of dsn through a bare relay: a unix
// socket in a directory of its own whose every connection is copied to
// the server's socket and back, unparsed.
func relayConn(b *testing.B, dsn string) *pgx.Conn {
	b.Helper()
	upstream := serverSocket(b, dsn)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "twice-relay")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, fmt.Sprintf(".s.PGSQL.%d", cfg.Port)))
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	b.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("unix", upstream)
			if err != nil {
				client.Close()
				continue
			}
			wg.Go(func() { _, _ = io.Copy(server, client); server.Close() })
			wg.Go(func() { _, _ = io.Copy(client, server); client.Close() })
		}
	})
	cfg.Host = dir
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
