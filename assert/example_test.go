package assert_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/assert"
)

// DiffState on two hand-built snapshots: the ledger ids differ only by a
// burnt sequence value, so only the doubled reward shows.
func ExampleDiffState() {
	columns := []assert.Column{
		{Name: "id", Type: "bigint", Sequence: true},
		{Name: "order_id", Type: "bigint"},
		{Name: "points", Type: "integer"},
	}
	once := &assert.Snapshot{Tables: []assert.Table{{
		Name: "points_ledger", Columns: columns,
		Rows: [][]any{{int64(1), int64(9812), int64(50)}},
	}}}
	twice := &assert.Snapshot{Tables: []assert.Table{{
		Name: "points_ledger", Columns: columns,
		Rows: [][]any{{int64(2), int64(9812), int64(50)}, {int64(3), int64(9812), int64(50)}},
	}}}
	diffs, err := assert.DiffState(once, twice, assert.Options{Label: "run-twice"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, d := range diffs {
		fmt.Println(d)
	}
	// Output:
	// table "points_ledger" after run-twice mismatch (-once +twice):
	//   []map[string]any{
	//   	... // 1 identical row
	// + 	{"id": s"#2", "order_id": int64(9812), "points": int64(50)},
	//   }
}

// The whole oracle on a real database: two clean reference runs find the
// volatile columns, then the scenario is compared with the first. The
// harness does this for every scenario, each on a fresh database; one
// connection stands in for all three here.
func ExampleStateEqual() {
	var t *testing.T // in a test: the test's own t
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("TWICE_DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	take := func() *assert.Snapshot {
		s, err := assert.TakeSnapshot(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	ref1 := take() // after one clean run
	ref2 := take() // after another clean run
	got := take()  // after the scenario
	assert.StateEqual(t, ref1, got, assert.Options{
		Label:    "run-twice",
		Volatile: assert.VolatileColumns(ref1, ref2),
	})
}
