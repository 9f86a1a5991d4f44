package harness_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/freshdb"
	"github.com/runtwice/twice/internal/pgserver"
)

const ledgerSchema = `
CREATE TABLE customers (id bigserial PRIMARY KEY, points int NOT NULL DEFAULT 0);
CREATE TABLE points_ledger (
  id bigserial PRIMARY KEY,
  customer_id bigint NOT NULL REFERENCES customers (id),
  order_id bigint NOT NULL,
  reason text NOT NULL,
  points int NOT NULL,
  UNIQUE (order_id, reason)
);
INSERT INTO customers (id, points) VALUES (77, 120);
`

func rewardWithLedger(ctx context.Context, db *pgxpool.Pool) error {
	_, err := db.Exec(ctx, `
WITH added AS (
  INSERT INTO points_ledger (customer_id, order_id, reason, points)
  VALUES (77, 9812, 'order_reward', 50)
  ON CONFLICT (order_id, reason) DO NOTHING
  RETURNING customer_id, points
)
UPDATE customers c SET points = c.points + added.points
FROM added WHERE c.id = added.customer_id`)
	return err
}

// BenchmarkLedger checks the seed's correct ledger job, with the default
// faults and with the run-twice issue's two (run twice, producer retry),
// and in the same loop runs the handler bare once on a fresh database, so
// the ratio compares like with like on a noisy machine.
func BenchmarkLedger(b *testing.B) {
	b.Run("default", func(b *testing.B) { benchmarkLedger(b, nil) })
	b.Run("run-twice", func(b *testing.B) {
		benchmarkLedger(b, []faults.Fault{faults.RunTwice(), faults.ProducerRetry()})
	})
}

func benchmarkLedger(b *testing.B, fs []faults.Fault) {
	ctx := context.Background()
	job := harness.Job{Name: "ledger", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return rewardWithLedger(ctx, d.DB)
	}}
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(ledgerSchema)}, Faults: fs}

	srv, err := pgserver.Shared(ctx)
	if err != nil {
		b.Fatal(err)
	}
	// A template of its own, so the bare runs never get a database the
	// checks used (and whose sessions may still be ending).
	tmpl, err := freshdb.Prepare(ctx, srv, []freshdb.Step{{Name: "SQL", SQL: ledgerSchema + "\n-- the bare runs'"}})
	if err != nil {
		b.Fatal(err)
	}
	bare := func() {
		db, err := tmpl.Fresh(ctx)
		if err != nil {
			b.Fatal(err)
		}
		pool, err := pgxpool.New(ctx, db.ConnString)
		if err != nil {
			b.Fatal(err)
		}
		if err := rewardWithLedger(ctx, pool); err != nil {
			b.Fatal(err)
		}
		pool.Close()
		if err := db.Drop(ctx); err != nil {
			b.Fatal(err)
		}
	}

	var checkTime, bareTime time.Duration
	scenarios := 0
	started0, connects0 := harness.BackendCounts()
	for b.Loop() {
		start := time.Now()
		res, err := harness.Run(ctx, job, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if !res.Idempotent() {
			b.Fatalf("the ledger job was found not idempotent: %+v", res.Failed())
		}
		checkTime += time.Since(start)
		scenarios += len(res.Scenarios) + 2 // and the two references

		start = time.Now()
		bare()
		bareTime += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(float64(checkTime.Microseconds())/1000/n, "ms/check")
	b.ReportMetric(float64(checkTime.Microseconds())/1000/float64(scenarios), "ms/scenario")
	b.ReportMetric(float64(bareTime.Microseconds())/1000/n, "ms/bare")
	b.ReportMetric(float64(checkTime)/float64(bareTime), "check/bare")
	started, connects := harness.BackendCounts()
	b.ReportMetric(float64(started-started0)/n, "backends/check")
	b.ReportMetric(float64(connects-connects0)/n, "connects/check")
	b.ReportMetric(0, "ns/op") // the loop times both; the metrics above split them
}

// BenchmarkConfirm is what confirming findings costs: the seed's broken
// ledger job (a bare increment: every fault that delivers twice fails)
// beside the correct one, in one loop. Each failing scenario runs again
// on a fresh database, so reruns/scenario is the share that failed, and
// broken/correct the cost per scenario of a check that finds something
// against one that passes.
func BenchmarkConfirm(b *testing.B) {
	ctx := context.Background()
	correct := harness.Job{Name: "ledger", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return rewardWithLedger(ctx, d.DB)
	}}
	broken := harness.Job{Name: "bare-increment", Handler: func(ctx context.Context, d *harness.Delivery) error {
		_, err := d.DB.Exec(ctx, `UPDATE customers SET points = points + 50 WHERE id = 77`)
		return err
	}}
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(ledgerSchema)}}
	var brokenTime, correctTime time.Duration
	var brokenScenarios, correctScenarios, reruns int
	for b.Loop() {
		start := time.Now()
		res, err := harness.Run(ctx, broken, cfg)
		if err != nil {
			b.Fatal(err)
		}
		brokenTime += time.Since(start)
		if res.Outcome != result.OutcomeFinding {
			b.Fatalf("the broken job's outcome is %s, want a finding", res.Outcome)
		}
		for _, s := range res.Scenarios {
			if s.Rerun != nil {
				reruns++
			}
		}
		brokenScenarios += len(res.Scenarios)
		if err := res.DropDatabases(ctx); err != nil {
			b.Fatal(err)
		}

		start = time.Now()
		res, err = harness.Run(ctx, correct, cfg)
		if err != nil {
			b.Fatal(err)
		}
		correctTime += time.Since(start)
		if !res.Idempotent() {
			b.Fatalf("the ledger job was found not idempotent: %+v", res.Failed())
		}
		correctScenarios += len(res.Scenarios)
	}
	perBroken := float64(brokenTime.Microseconds()) / 1000 / float64(brokenScenarios)
	perCorrect := float64(correctTime.Microseconds()) / 1000 / float64(correctScenarios)
	b.ReportMetric(perBroken, "ms/broken-scenario")
	b.ReportMetric(perCorrect, "ms/correct-scenario")
	b.ReportMetric(perBroken/perCorrect, "broken/correct")
	b.ReportMetric(float64(reruns)/float64(brokenScenarios), "reruns/scenario")
	b.ReportMetric(0, "ns/op")
}
