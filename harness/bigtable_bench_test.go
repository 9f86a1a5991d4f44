package harness_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runtwice/twice/harness"
)

// BenchmarkTouchedBigTable is what a check costs when the job touches few
// rows of a big table: a job that marks 1,000 orders paid, on a table of
// 1,000 rows and on one of 1,000,000 (200-byte rows). With the write
// history, a snapshot reads only the rows written and a reset puts back
// only those, so the time per scenario follows the rows touched, not the
// table. Run each size in a process of its own to read its peak memory:
//
//	go test -run '^$' -bench 'BenchmarkTouchedBigTable/rows=1000000$' ./harness
//
// MB-peak is the test process's VmHWM when the loop ends.
func BenchmarkTouchedBigTable(b *testing.B) {
	for _, rows := range []int{1_000, 1_000_000} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) { benchmarkTouched(b, rows) })
	}
}

func benchmarkTouched(b *testing.B, rows int) {
	ctx := context.Background()
	schema := fmt.Sprintf(`
CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL, paid_at timestamptz, note text NOT NULL);
INSERT INTO orders SELECT i, 'new', NULL, repeat('x', 160) FROM generate_series(1, %d) i;
ANALYZE orders;`, rows)
	job := harness.Job{Name: "mark-paid", Handler: func(ctx context.Context, d *harness.Delivery) error {
		_, err := d.DB.Exec(ctx, `UPDATE orders SET status = 'paid', paid_at = $1 WHERE id <= 1000 AND status = 'new'`, d.Now())
		return err
	}}
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(schema)}}
	// The template is built once, outside the figures.
	if _, err := harness.Run(ctx, job, cfg); err != nil {
		b.Fatal(err)
	}
	var checkTime time.Duration
	scenarios := 0
	for b.Loop() {
		start := time.Now()
		res, err := harness.Run(ctx, job, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if !res.Idempotent() {
			b.Fatalf("the mark-paid job was found not idempotent: %+v", res.Failed())
		}
		checkTime += time.Since(start)
		scenarios += len(res.Scenarios) + 2 // and the two references
	}
	b.ReportMetric(float64(checkTime.Microseconds())/1000/float64(b.N), "ms/check")
	b.ReportMetric(float64(checkTime.Microseconds())/1000/float64(scenarios), "ms/scenario")
	b.ReportMetric(float64(peakKB(b))/1024, "MB-peak")
	b.ReportMetric(0, "ns/op")
}

// peakKB is the process's peak resident set (VmHWM), in kB.
func peakKB(b *testing.B) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Skipf("no /proc/self/status to read the peak memory from: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatalf("reading VmHWM %q: %v", v, err)
			}
			return n
		}
	}
	b.Fatal("/proc/self/status has no VmHWM")
	return 0
}
