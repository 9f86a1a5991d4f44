package assert_test

import (
	"context"
	"testing"

	"github.com/runtwice/twice/assert"
)

// benchSchema is a small shop: 8,000 rows (8,100 after the job) over three tables, with
// sequences, a foreign key, jsonb and timestamps.
const benchSchema = `
	CREATE TABLE customers (id bigserial PRIMARY KEY, name text NOT NULL, points int NOT NULL DEFAULT 0);
	CREATE TABLE points_ledger (
		id bigserial PRIMARY KEY, customer_id bigint NOT NULL REFERENCES customers (id),
		order_id bigint NOT NULL, reason text NOT NULL, points int NOT NULL,
		created_at timestamptz NOT NULL DEFAULT '2024-01-01', UNIQUE (order_id, reason));
	CREATE TABLE events (id bigserial PRIMARY KEY, payload jsonb NOT NULL, amount numeric(10,2));
	INSERT INTO customers (name, points) SELECT 'c' || g, g % 500 FROM generate_series(1, 2000) g;
	INSERT INTO points_ledger (customer_id, order_id, reason, points)
		SELECT 1 + g % 2000, g, 'order_reward', 50 FROM generate_series(1, 5000) g;
	INSERT INTO events (payload, amount)
		SELECT jsonb_build_object('order', g, 'tags', jsonb_build_array('a', 'b')), g / 7.0 FROM generate_series(1, 1000) g;`

const benchRows = 8100

func BenchmarkTakeSnapshot(b *testing.B) {
	conn := newDB(b, benchSchema)
	ctx := context.Background()
	for b.Loop() {
		if _, err := assert.TakeSnapshot(ctx, conn); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchRows), "ns/row")
}

// BenchmarkSnapshotSmall is a scenario's snapshot of a small schema (the
// seed's ledger: two tables, three rows), where the catalog, not the
// rows, is the cost: TakeSnapshot reads the catalog every time, a
// Snapshotter once.
func BenchmarkSnapshotSmall(b *testing.B) {
	conn := newDB(b, `
		CREATE TABLE customers (id bigserial PRIMARY KEY, points int NOT NULL DEFAULT 0);
		CREATE TABLE points_ledger (id bigserial PRIMARY KEY, customer_id bigint NOT NULL REFERENCES customers (id),
			order_id bigint NOT NULL, reason text NOT NULL, points int NOT NULL, UNIQUE (order_id, reason));
		INSERT INTO customers (id, points) VALUES (77, 170);
		INSERT INTO points_ledger (customer_id, order_id, reason, points) VALUES (77, 9812, 'order_reward', 50)`)
	ctx := context.Background()
	b.Run("TakeSnapshot", func(b *testing.B) {
		for b.Loop() {
			if _, err := assert.TakeSnapshot(ctx, conn); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/snapshot")
	})
	b.Run("Snapshotter", func(b *testing.B) {
		var s assert.Snapshotter
		for b.Loop() {
			if _, err := s.Take(ctx, conn); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/snapshot")
	})
}

func BenchmarkDiffState(b *testing.B) {
	conn := newDB(b, benchSchema)
	const job = `INSERT INTO points_ledger (customer_id, order_id, reason, points)
		SELECT 1 + g % 2000, g, 'order_bonus', 10 FROM generate_series(1, 100) g`
	exec(b, conn, job)
	once := snapshot(b, conn)
	// The scenario burnt ids before its rows landed and, in the "differ"
	// case, paid ten rewards twice.
	exec(b, conn, `DELETE FROM points_ledger WHERE reason = 'order_bonus';
		SELECT setval('points_ledger_id_seq', 10000)`)
	exec(b, conn, job)
	equal := snapshot(b, conn)
	exec(b, conn, `INSERT INTO points_ledger (customer_id, order_id, reason, points)
		SELECT 1 + g % 2000, g, 'order_reward_again', 50 FROM generate_series(1, 10) g`)
	differ := snapshot(b, conn)
	for _, bc := range []struct {
		name  string
		twice *assert.Snapshot
		diffs int
	}{{"equal", equal, 0}, {"differ", differ, 1}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if got, _ := assert.DiffState(once, bc.twice, assert.Options{}); len(got) != bc.diffs {
					b.Fatalf("DiffState found %d differing tables, want %d", len(got), bc.diffs)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchRows), "ns/row")
		})
	}
}
