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

	"github.com/runtwice/twice/internal/wireproxy"
)

// BenchmarkProxyOverhead runs the same 200-statement handler straight to the
// server and through proxies (loopback TCP and unix socket) whose hooks let
// every step through, in the same iterations (rotating which goes first),
// and reports each per statement and the proxies' ratios to direct: of the
// totals, and the median of the iterations' own ratios (-p50), which a
// burst of load on a shared machine moves less. The relay is the floor of
// any proxy in between: a unix socket whose bytes are copied to the
// server's and back (io.Copy each way) with nothing parsed, so unix/relay
// is what the proxy's own work costs over the extra hop.
func BenchmarkProxyOverhead(b *testing.B) {
	const stmts = 200
	handlers := []struct {
		name string
		run  func(ctx context.Context, c *pgx.Conn) error
	}{
		{"select", func(ctx context.Context, c *pgx.Conn) error {
			var n int
			for i := range stmts {
				if err := c.QueryRow(ctx, "SELECT $1::int", i).Scan(&n); err != nil {
					return err
				}
			}
			return nil
		}},
		{"insert-tx", func(ctx context.Context, c *pgx.Conn) error {
			tx, err := c.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			for i := range stmts - 2 {
				if _, err := tx.Exec(ctx, "INSERT INTO items (id, note) VALUES ($1, 'x')", 1000+i); err != nil {
					return err
				}
			}
			return tx.Rollback(ctx) // the same cost as COMMIT here, and the table stays small
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
	ctx := context.Background()
	conns := []*pgx.Conn{connect(b, dsn), connect(b, overTCP.DSN()), connect(b, overUnix.DSN()), relayConn(b, dsn)}
	for _, h := range handlers {
		b.Run(h.name, func(b *testing.B) {
			var took [4]time.Duration // direct, over TCP, over a unix socket, through a bare relay
			var tcpRatios, unixRatios, relayRatios []float64
			for i := 0; b.Loop(); i++ {
				var this [4]time.Duration
				for k := range conns {
					k = (k + i) % len(conns) // rotate who goes first
					start := time.Now()
					if err := h.run(ctx, conns[k]); err != nil {
						b.Fatal(err)
					}
					this[k] = time.Since(start)
					took[k] += this[k]
				}
				tcpRatios = append(tcpRatios, float64(this[1])/float64(this[0]))
				unixRatios = append(unixRatios, float64(this[2])/float64(this[0]))
				relayRatios = append(relayRatios, float64(this[3])/float64(this[0]))
			}
			n := float64(b.N * stmts)
			b.ReportMetric(float64(took[0].Nanoseconds())/n, "direct-ns/stmt")
			b.ReportMetric(float64(took[1].Nanoseconds())/n, "tcp-ns/stmt")
			b.ReportMetric(float64(took[2].Nanoseconds())/n, "unix-ns/stmt")
			b.ReportMetric(float64(took[1])/float64(took[0]), "tcp/direct")
			b.ReportMetric(float64(took[2])/float64(took[0]), "unix/direct")
			b.ReportMetric(median(tcpRatios), "tcp/direct-p50")
			b.ReportMetric(median(unixRatios), "unix/direct-p50")
			b.ReportMetric(float64(took[3])/float64(took[0]), "relay/direct")
			b.ReportMetric(median(relayRatios), "relay/direct-p50")
			b.ReportMetric(float64(took[2])/float64(took[3]), "unix/relay")
		})
	}
	if steps.Load() == 0 {
		b.Fatal("no step went through the proxy")
	}
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
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	if !strings.HasPrefix(cfg.Host, "/") {
		b.Skipf("the relay needs the server on a unix socket, not %s", cfg.Host)
	}
	upstream := filepath.Join(cfg.Host, fmt.Sprintf(".s.PGSQL.%d", cfg.Port))
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
