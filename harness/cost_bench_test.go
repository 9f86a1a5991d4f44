package harness_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runtwice/twice/harness"
)

// untouchedJob is issue 22's job: one INSERT ... ON CONFLICT DO NOTHING in
// a transaction, on the one table every schema below has.
func untouchedJob() harness.Job {
	return harness.Job{Name: "insert-once", Handler: func(ctx context.Context, d *harness.Delivery) error {
		tx, err := d.DB.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, `INSERT INTO items (id, note) VALUES (1, 'once') ON CONFLICT DO NOTHING`); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}}
}

const untouchedBase = "CREATE TABLE items (id bigint PRIMARY KEY, note text NOT NULL);\n"

// manyTables is n untouched tables of rows rows each.
func manyTables(n, rows int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "CREATE TABLE fixture_%d (id bigserial PRIMARY KEY, name text NOT NULL, n int NOT NULL);\n", i)
		fmt.Fprintf(&b, "INSERT INTO fixture_%d (name, n) SELECT 'name ' || g, g FROM generate_series(1, %d) g;\n", i, rows)
	}
	return b.String()
}

// bigTable is one untouched table of rows rows.
func bigTable(rows int) string {
	return "CREATE TABLE reference_data (id bigserial PRIMARY KEY, name text NOT NULL, n int NOT NULL);\n" +
		fmt.Sprintf("INSERT INTO reference_data (name, n) SELECT 'name ' || g, g FROM generate_series(1, %d) g;\n", rows)
}

// BenchmarkUntouched is issue 22's first rows: what a scenario of the
// default matrix costs as the schema grows by tables and rows the job
// never touches. Every schema is checked once per iteration, in one loop,
// so the ratios against the one-table schema (x-...) come from one run
// on whatever else the machine does. The first check of each schema
// (building its template) runs before the timed loop.
func BenchmarkUntouched(b *testing.B) {
	ctx := context.Background()
	cases := []struct{ name, schema string }{
		{"one-table", ""},
		{"50-tables", manyTables(50, 20)},
		{"200-tables", manyTables(200, 20)},
		{"100k-rows", bigTable(100_000)},
		{"1M-rows", bigTable(1_000_000)},
	}
	// TWICE_UNTOUCHED, a comma-separated list of case names, runs only
	// those (the first, one-table, always): the 1M-row case before the
	// change log took over 20 minutes on a loaded 2-core machine.
	if only := os.Getenv("TWICE_UNTOUCHED"); only != "" {
		keep := cases[:1]
		for _, c := range cases[1:] {
			if slices.Contains(strings.Split(only, ","), c.name) {
				keep = append(keep, c)
			}
		}
		cases = keep
	}
	job := untouchedJob()
	cfgs := make([]harness.Config, len(cases))
	for i, c := range cases {
		// A comment per case: the same schema text would share a template.
		cfgs[i] = harness.Config{Setup: []harness.Setup{harness.SQL(untouchedBase + c.schema + "-- " + c.name)}}
		if _, err := harness.Run(ctx, job, cfgs[i]); err != nil {
			b.Fatal(err)
		}
	}
	spent := make([]time.Duration, len(cases))
	scenarios := make([]int, len(cases))
	for b.Loop() {
		for i := range cases {
			start := time.Now()
			res, err := harness.Run(ctx, job, cfgs[i])
			if err != nil {
				b.Fatal(err)
			}
			spent[i] += time.Since(start)
			if !res.Idempotent() {
				b.Fatalf("%s: the job was found not idempotent: %+v", cases[i].name, res.Failed())
			}
			scenarios[i] += len(res.Scenarios) + 2 // and the two references
		}
	}
	per := make([]float64, len(cases))
	for i, c := range cases {
		per[i] = float64(spent[i].Microseconds()) / 1000 / float64(scenarios[i])
		b.ReportMetric(per[i], "ms/scenario-"+c.name)
	}
	for i, c := range cases[1:] {
		b.ReportMetric(per[i+1]/per[0], "x-"+c.name)
	}
	b.ReportMetric(0, "ns/op")
}
