package freshdb_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/internal/freshdb"
)

// approach is one way to give every scenario a fresh database.
type approach struct {
	name  string
	start func(b *testing.B, tpl *freshdb.Template) (handOut func(context.Context) (*freshdb.Database, error), stop func())
}

func variant(how, strategy string) func(*testing.B, *freshdb.Template) (func(context.Context) (*freshdb.Database, error), func()) {
	return func(b *testing.B, tpl *freshdb.Template) (func(context.Context) (*freshdb.Database, error), func()) {
		return freshdb.Variant(tpl, how, strategy).Fresh, func() {}
	}
}

// poolOfClones keeps clones made ahead by a background goroutine.
func poolOfClones(b *testing.B, tpl *freshdb.Template) (func(context.Context) (*freshdb.Database, error), func()) {
	v := freshdb.Variant(tpl, "clone", "WAL_LOG")
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *freshdb.Database, 4)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			d, err := v.Fresh(ctx)
			if err != nil {
				if ctx.Err() == nil {
					b.Error(err)
				}
				close(ready)
				return
			}
			select {
			case ready <- d:
			case <-ctx.Done():
				_ = d.Drop(context.Background())
				close(ready)
				return
			}
		}
	})
	handOut := func(ctx context.Context) (*freshdb.Database, error) {
		select {
		case d := <-ready:
			return d, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	stop := func() {
		cancel()
		wg.Wait()
		for d := range ready {
			_ = d.Drop(context.Background())
		}
	}
	return handOut, stop
}

var approaches = []approach{
	{"reuse", variant("reuse", "")},
	{"clone-WAL_LOG", variant("clone", "WAL_LOG")},
	{"clone-FILE_COPY", variant("clone", "FILE_COPY")},
	{"pool-of-clones", poolOfClones},
	{"handler-only", variant("reuse", "")}, // BenchmarkScenario's floor
}

func reportPercentiles(b *testing.B, prefix string, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	at := func(p float64) float64 {
		return float64(samples[int(p*float64(len(samples)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(at(0.5), prefix+"-p50-ms")
	b.ReportMetric(at(0.9), prefix+"-p90-ms")
}

// BenchmarkHandOut measures handing out a fresh database (and, separately,
// giving it back) for the small fixture.
func BenchmarkHandOut(b *testing.B) {
	ctx := context.Background()
	srv := server(b)
	for _, a := range approaches[:len(approaches)-1] {
		b.Run(a.name, func(b *testing.B) {
			tpl, err := freshdb.Prepare(ctx, srv, fixture)
			if err != nil {
				b.Fatal(err)
			}
			handOut, stop := a.start(b, tpl)
			defer stop()
			var outs, backs []time.Duration
			for b.Loop() {
				t0 := time.Now()
				d, err := handOut(ctx)
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := d.Drop(ctx); err != nil {
					b.Fatal(err)
				}
				outs = append(outs, t1.Sub(t0))
				backs = append(backs, time.Since(t1))
			}
			reportPercentiles(b, "handout", outs)
			reportPercentiles(b, "giveback", backs)
		})
	}
}

// tinyHandler is a job handler's worth of work: its own connection, a read,
// an update and an insert in a transaction.
func tinyHandler(ctx context.Context, connString string) error {
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	var points int
	if err := tx.QueryRow(ctx, "SELECT points FROM customers WHERE id = 1").Scan(&points); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "UPDATE customers SET points = $1 WHERE id = 1", points+50); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "INSERT INTO orders (customer_id, total) VALUES (1, 9.99)"); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// BenchmarkScenario measures sustained scenarios per second: hand-out, the
// tiny handler, give back; "serial" is one worker, "parallel" one worker per
// GOMAXPROCS.
func BenchmarkScenario(b *testing.B) {
	ctx := context.Background()
	srv := server(b)
	for _, a := range approaches {
		for _, parallel := range []bool{false, true} {
			name := a.name + "/serial"
			if parallel {
				name = a.name + "/parallel"
			}
			b.Run(name, func(b *testing.B) {
				tpl, err := freshdb.Prepare(ctx, srv, fixture)
				if err != nil {
					b.Fatal(err)
				}
				handOut, stop := a.start(b, tpl)
				defer stop()
				scenario := func() error {
					d, err := handOut(ctx)
					if err != nil {
						return err
					}
					if err := tinyHandler(ctx, d.ConnString); err != nil {
						return err
					}
					return d.Drop(ctx)
				}
				if a.name == "handler-only" {
					// the floor: the handler on one database, never reset
					d, err := handOut(ctx)
					if err != nil {
						b.Fatal(err)
					}
					defer d.Drop(ctx)
					scenario = func() error { return tinyHandler(ctx, d.ConnString) }
				}
				start := time.Now()
				if parallel {
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if err := scenario(); err != nil {
								b.Error(err)
								return
							}
						}
					})
				} else {
					for b.Loop() {
						if err := scenario(); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "scenarios/s")
			})
		}
	}
}

// BenchmarkGiveBackBigFixture measures giving back a reused clone of a
// fixture of 20 tables of 500 rows each, after a scenario that wrote one
// of them ("one-table") or all ("all-tables").
func BenchmarkGiveBackBigFixture(b *testing.B) {
	ctx := context.Background()
	srv := server(b)
	var schema strings.Builder
	for i := range 20 {
		fmt.Fprintf(&schema, "CREATE TABLE t%d (id serial PRIMARY KEY, v text, n int);\n", i)
		fmt.Fprintf(&schema, "INSERT INTO t%d (v, n) SELECT 'row ' || g, g FROM generate_series(1, 500) g;\n", i)
	}
	tpl, err := freshdb.Prepare(ctx, srv, []freshdb.Step{{Name: "big.sql", SQL: schema.String()}})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct{ name, write string }{
		{"one-table", "UPDATE t7 SET n = n + 1 WHERE id = 42"},
		{"all-tables", func() string {
			var s strings.Builder
			for i := range 20 {
				fmt.Fprintf(&s, "UPDATE t%d SET n = n + 1 WHERE id = 42;\n", i)
			}
			return s.String()
		}()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var backs []time.Duration
			for b.Loop() {
				d, err := tpl.Fresh(ctx)
				if err != nil {
					b.Fatal(err)
				}
				conn, err := pgx.Connect(ctx, d.ConnString)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := conn.Exec(ctx, bc.write); err != nil {
					b.Fatal(err)
				}
				conn.Close(ctx)
				t0 := time.Now()
				if err := d.Drop(ctx); err != nil {
					b.Fatal(err)
				}
				backs = append(backs, time.Since(t0))
			}
			reportPercentiles(b, "giveback", backs)
		})
	}
}
