package assert_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/internal/blame"
)

// Hand-built snapshots in the shape TakeSnapshot gives.

func customers(rows ...[]any) assert.Table {
	return assert.Table{
		Name: "customers",
		Columns: []assert.Column{
			{Name: "id", Type: "bigint", Sequence: true},
			{Name: "name", Type: "text"},
			{Name: "points", Type: "integer"},
		},
		Rows: rows,
	}
}

func ledger(rows ...[]any) assert.Table {
	return assert.Table{
		Name: "points_ledger",
		Columns: []assert.Column{
			{Name: "id", Type: "bigint", Sequence: true},
			{Name: "customer_id", Type: "bigint", References: "customers.id"},
			{Name: "order_id", Type: "bigint"},
			{Name: "points", Type: "integer"},
			{Name: "created_at", Type: "timestamp with time zone"},
		},
		Rows: rows,
	}
}

var (
	t0 = time.Date(2024, 3, 1, 10, 0, 0, 0, time.UTC)
	t1 = t0.Add(time.Millisecond)
)

func snap(tables ...assert.Table) *assert.Snapshot { return &assert.Snapshot{Tables: tables} }

func TestDiffState(t *testing.T) {
	once := snap(
		customers([]any{int64(1), "asha", int64(0)}, []any{int64(2), "ben", int64(50)}),
		ledger([]any{int64(1), int64(2), int64(9812), int64(50), t0}),
	)
	tests := []struct {
		name   string
		twice  *assert.Snapshot
		opts   assert.Options
		tables []string // that differ; their text is in testdata/diff_<name>.golden
	}{
		{
			name: "burnt ids equal",
			twice: snap(
				customers([]any{int64(7), "asha", int64(0)}, []any{int64(9), "ben", int64(50)}),
				ledger([]any{int64(4), int64(9), int64(9812), int64(50), t0}),
			),
		},
		{
			name: "row order does not matter",
			twice: snap(
				customers([]any{int64(2), "ben", int64(50)}, []any{int64(1), "asha", int64(0)}),
				ledger([]any{int64(1), int64(2), int64(9812), int64(50), t0}),
			),
		},
		{
			name: "extra row",
			twice: snap(
				customers([]any{int64(1), "asha", int64(0)}, []any{int64(2), "ben", int64(100)}),
				ledger([]any{int64(1), int64(2), int64(9812), int64(50), t0}, []any{int64(3), int64(2), int64(9812), int64(50), t0}),
			),
			tables: []string{"customers", "points_ledger"},
		},
		{
			name: "foreign key follows the renumbering",
			twice: snap(
				customers([]any{int64(1), "asha", int64(0)}, []any{int64(2), "ben", int64(50)}),
				ledger([]any{int64(1), int64(1), int64(9812), int64(50), t0}),
			),
			tables: []string{"points_ledger"},
		},
		{
			name: "duplicate rows count",
			twice: snap(
				customers([]any{int64(1), "asha", int64(0)}, []any{int64(2), "ben", int64(50)}),
				ledger([]any{nil, int64(2), int64(9812), int64(50), t0}, []any{nil, int64(2), int64(9812), int64(50), t0}),
			),
			opts:   assert.Options{IgnoreColumns: []string{"points_ledger.id"}},
			tables: []string{"points_ledger"},
		},
		{
			name:   "table missing in twice",
			twice:  snap(customers([]any{int64(1), "asha", int64(0)}, []any{int64(2), "ben", int64(50)})),
			tables: []string{"points_ledger"},
		},
		{
			name: "table missing in once",
			twice: snap(
				customers([]any{int64(1), "asha", int64(0)}, []any{int64(2), "ben", int64(50)}),
				ledger([]any{int64(1), int64(2), int64(9812), int64(50), t0}),
				assert.Table{Name: "billing.audit", Columns: []assert.Column{{Name: "note", Type: "text"}}, Rows: [][]any{}},
			),
			tables: []string{"billing.audit"},
		},
		{
			name: "ignore tables and columns",
			twice: snap(
				customers([]any{int64(1), "asha", int64(0)}, []any{int64(2), "ben", int64(100)}),
				ledger([]any{int64(1), int64(2), int64(9812), int64(50), t1}),
				assert.Table{Name: "jobs", Columns: []assert.Column{{Name: "id"}}, Rows: [][]any{{int64(1)}}},
			),
			opts: assert.Options{IgnoreTables: []string{"jobs"}, IgnoreColumns: []string{"customers.points", "created_at"}},
		},
		{
			name:  "volatile left out",
			twice: snap(customers([]any{int64(1), "asha", int64(0)}, []any{int64(2), "ben", int64(50)}), ledger([]any{int64(1), int64(2), int64(9812), int64(50), t1})),
			opts:  assert.Options{Volatile: []string{"points_ledger.created_at"}},
		},
		{
			name:   "volatile compared when not named",
			twice:  snap(customers([]any{int64(1), "asha", int64(0)}, []any{int64(2), "ben", int64(50)}), ledger([]any{int64(1), int64(2), int64(9812), int64(50), t1})),
			opts:   assert.Options{Label: "crash-before-ack"},
			tables: []string{"points_ledger"},
		},
		{
			name:  "cmp options",
			twice: snap(customers([]any{int64(1), "asha", int64(0)}, []any{int64(2), "ben", int64(50)}), ledger([]any{int64(1), int64(2), int64(9812), int64(50), t1})),
			opts:  assert.Options{CmpOptions: []cmp.Option{cmpopts.EquateApproxTime(time.Second)}},
		},
		{
			name: "changed column set",
			twice: snap(
				assert.Table{Name: "customers", Columns: []assert.Column{{Name: "id", Sequence: true}, {Name: "name"}}, Rows: [][]any{{int64(1), "asha"}, {int64(2), "ben"}}},
				ledger([]any{int64(1), int64(2), int64(9812), int64(50), t0}),
			),
			tables: []string{"customers"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			diffs := mustDiffState(t, once, tt.twice, tt.opts)
			var tables, text []string
			for _, d := range diffs {
				tables = append(tables, d.Table)
				text = append(text, d.String())
			}
			require.Equal(t, tt.tables, tables)
			if len(diffs) > 0 {
				goldenText(t, "diff_"+strings.ReplaceAll(tt.name, " ", "_"), strings.Join(text, "\n")+"\n")
			}
		})
	}
}

func TestCheckStateReportsPanickingOptionAsInternal(t *testing.T) {
	once := snap(customers([]any{int64(1), "asha", int64(0)}))
	twice := snap(customers([]any{int64(1), "asha", int64(5)}))
	err := assert.CheckState(once, twice, assert.Options{CmpOptions: []cmp.Option{cmp.Transformer("boom", func(int64) int64 { panic("boom") })}})
	require.Equal(t, blame.Message(err), `[twice] internal: go-cmp panicked comparing table "customers"; check Options.CmpOptions: boom`)

	diffs, err := assert.DiffState(once, twice, assert.Options{CmpOptions: []cmp.Option{cmp.Transformer("boom", func(int64) int64 { panic("boom") })}})
	require.Error(t, err, "a broken comparison is not a difference")
	require.Empty(t, diffs)
}

func TestDiffStateRenumbering(t *testing.T) {
	// Composite and chained foreign keys, a self reference and a text key
	// drawn from a sequence.
	build := func(projectIDs [2]int64, codes [2]string, parent int64) *assert.Snapshot {
		return snap(
			assert.Table{
				Name:    "projects",
				Columns: []assert.Column{{Name: "tenant_id"}, {Name: "id", Sequence: true}, {Name: "code", Sequence: true}, {Name: "parent_id", References: "projects.id"}},
				Rows: [][]any{
					{int64(1), projectIDs[0], codes[0], nil},
					{int64(1), projectIDs[1], codes[1], parent},
				},
			},
			assert.Table{
				Name:    "tasks",
				Columns: []assert.Column{{Name: "tenant_id", References: "projects.tenant_id"}, {Name: "project_id", References: "projects.id"}},
				Rows:    [][]any{{int64(1), projectIDs[1]}},
			},
			assert.Table{
				Name:    "task_notes",
				Columns: []assert.Column{{Name: "project_id", References: "tasks.project_id"}},
				Rows:    [][]any{{projectIDs[1]}},
			},
		)
	}
	// "P-10" sorts before "P-8" as bytes; ranks must keep drawing order.
	once := build([2]int64{1, 2}, [2]string{"P-8", "P-9"}, 1)
	require.Empty(t, mustDiffState(t, once, build([2]int64{5, 11}, [2]string{"P-8", "P-10"}, 5), assert.Options{}))

	// The task now points at the first project.
	swapped := build([2]int64{5, 11}, [2]string{"P-8", "P-10"}, 5)
	swapped.Tables[1].Rows[0][1] = int64(5)
	swapped.Tables[2].Rows[0][0] = int64(5)
	diffs := mustDiffState(t, once, swapped, assert.Options{})
	require.Len(t, diffs, 2)
	require.Equal(t, "task_notes", diffs[0].Table)
	require.Equal(t, "tasks", diffs[1].Table)
	require.Contains(t, diffs[1].Diff, `- 		"project_id": s"#2",`)
	require.Contains(t, diffs[1].Diff, `+ 		"project_id": s"#1",`)
}

func TestDiffStateTruncatesLongTables(t *testing.T) {
	var rows, more [][]any
	for i := range 120 {
		rows = append(rows, []any{int64(i), "ben", int64(50)})
		more = append(more, []any{int64(i), "ben", int64(50)}, []any{int64(1000 + i), fmt.Sprintf("clone %03d", i), int64(50)})
	}
	diffs := mustDiffState(t, snap(customers(rows...)), snap(customers(more...)), assert.Options{Label: "run-twice"})
	require.Len(t, diffs, 1)
	require.Equal(t, 50, strings.Count(diffs[0].Diff, "\n+ \t{"), "at most 50 rows shown")
	goldenText(t, "truncated", diffs[0].String())
}

func TestVolatileColumns(t *testing.T) {
	ref1 := snap(
		customers([]any{int64(1), "asha", int64(0)}, []any{int64(2), "ben", int64(50)}),
		ledger([]any{int64(1), int64(2), int64(9812), int64(50), t0}),
		assert.Table{Name: "only_in_ref1", Columns: []assert.Column{{Name: "x"}}, Rows: [][]any{{int64(1)}}},
	)
	ref2 := snap(
		customers([]any{int64(3), "asha", int64(0)}, []any{int64(4), "ben", int64(50)}),
		ledger([]any{int64(8), int64(4), int64(9812), int64(50), t1}),
	)
	require.Equal(t, []string{"points_ledger.created_at"}, assert.VolatileColumns(ref1, ref2))
	require.Empty(t, assert.VolatileColumns(ref1, ref1))
	require.Empty(t, assert.VolatileColumns(nil, ref1))

	// A differing row count leaves nothing to compare column by column.
	ref3 := snap(customers([]any{int64(1), "asha", int64(0)}))
	require.Equal(t, []string{"customers.id", "customers.name", "customers.points"}, assert.VolatileColumns(ref1, ref3))
}

func docs(rows ...[]any) assert.Table {
	return assert.Table{
		Name:    "docs",
		Columns: []assert.Column{{Name: "id", Type: "integer"}, {Name: "payload", Type: "jsonb"}, {Name: "at", Type: "timestamp with time zone"}},
		Rows:    rows,
	}
}

// doc is a decoded jsonb document as TakeSnapshot gives it.
func doc(token string, n int64, tags ...any) map[string]any {
	return map[string]any{"n": json.Number(fmt.Sprint(n)), "meta": map[string]any{"token": token, "tags": tags}}
}

func TestVolatileColumnsJSONPath(t *testing.T) {
	ref1 := snap(docs(
		[]any{int64(1), doc("u1", 1, "a", "x1"), t0},
		[]any{int64(2), doc("u2", 5, "b", "x2"), t0},
	))
	ref2 := snap(docs(
		[]any{int64(2), doc("u4", 5, "b", "x4"), t1},
		[]any{int64(1), doc("u3", 1, "a", "x3"), t1},
	))
	volatile := assert.VolatileColumns(ref1, ref2)
	require.Equal(t, []string{"docs.at", "docs.payload.meta.tags.1", "docs.payload.meta.token"}, volatile,
		"rows paired by id; only the keys that differ")

	// The counter next to the volatile keys is still compared.
	twice := snap(docs(
		[]any{int64(1), doc("u5", 2, "a", "x5"), t1},
		[]any{int64(2), doc("u6", 5, "b", "x6"), t1},
	))
	diffs, err := assert.DiffState(ref1, twice, assert.Options{Label: "run-twice", Volatile: volatile})
	require.NoError(t, err)
	require.Len(t, diffs, 1)
	require.Contains(t, diffs[0].Diff, `"n":`)
	require.NotContains(t, diffs[0].Diff, `"token"`)
	err = assert.CheckState(ref1, twice, assert.Options{Label: "run-twice", Volatile: volatile})
	require.ErrorContains(t, err, "volatile columns, left out: docs.at, docs.payload.meta.tags.1, docs.payload.meta.token")

	// A document of another shape is volatile whole.
	ref3 := snap(docs(
		[]any{int64(1), "not an object", t0},
		[]any{int64(2), doc("u2", 5, "b", "x2"), t0},
	))
	require.Equal(t, []string{"docs.payload"}, assert.VolatileColumns(ref1, ref3))
}

func TestIgnoreColumnsJSONPath(t *testing.T) {
	diff := func(once, twice *assert.Snapshot, opts assert.Options) []assert.TableDiff {
		t.Helper()
		d, err := assert.DiffState(once, twice, opts)
		require.NoError(t, err)
		return d
	}
	once := snap(docs([]any{int64(1), doc("u1", 1), t0}))
	twice := snap(docs([]any{int64(1), doc("u2", 1), t0}))
	require.Len(t, diff(once, twice, assert.Options{}), 1)
	require.Empty(t, diff(once, twice, assert.Options{IgnoreColumns: []string{"docs.payload.meta.token"}}))
	require.Len(t, diff(once, twice, assert.Options{IgnoreColumns: []string{"other.payload.meta.token"}}), 1, "another table's path")
	twice = snap(docs([]any{int64(1), doc("u2", 2), t0}))
	require.Len(t, diff(once, twice, assert.Options{IgnoreColumns: []string{"docs.payload.meta.token"}}), 1, "the rest is compared")
}

func TestStateEqual(t *testing.T) {
	once := snap(customers([]any{int64(1), "asha", int64(0)}))
	t.Run("equal", func(t *testing.T) {
		rt := &recordingT{}
		require.True(t, assert.StateEqual(rt, once, snap(customers([]any{int64(2), "asha", int64(0)})), assert.Options{}))
		require.Empty(t, rt.errors)
		require.Equal(t, 1, rt.helpers)
	})
	t.Run("differs", func(t *testing.T) {
		rt := &recordingT{}
		twice := snap(customers([]any{int64(1), "asha", int64(50)}))
		require.False(t, assert.StateEqual(rt, once, twice, assert.Options{}))
		require.Len(t, rt.errors, 1)
		require.True(t, strings.HasPrefix(rt.errors[0], "[twice] not idempotent: the database differs from one clean run in 1 table\n"), rt.errors[0])
		goldenText(t, "state_equal_no_label", rt.errors[0])
	})
	t.Run("nil snapshot", func(t *testing.T) {
		rt := &recordingT{}
		require.False(t, assert.StateEqual(rt, once, nil, assert.Options{}))
		require.Equal(t, []string{"[twice] internal: CheckState: the twice snapshot is nil; take it with TakeSnapshot after the scenario"}, rt.errors)
	})
	t.Run("a TestingT without Helper", func(t *testing.T) {
		var ft errorfOnly
		require.False(t, assert.StateEqual(&ft, once, snap(), assert.Options{}))
		require.Equal(t, 1, ft.calls)
	})
}

type errorfOnly struct{ calls int }

func (e *errorfOnly) Errorf(string, ...any) { e.calls++ }

func TestCheckState(t *testing.T) {
	once := snap(customers([]any{int64(1), "asha", int64(0)}))
	require.NoError(t, assert.CheckState(once, once, assert.Options{}))
	err := assert.CheckState(once, snap(), assert.Options{Label: "redrive", Volatile: []string{"customers.updated_at"}})
	var se *assert.StateError
	require.ErrorAs(t, err, &se)
	require.Equal(t, "redrive", se.Label)
	require.Equal(t, []string{"customers"}, []string{se.Diffs[0].Table})
	require.Equal(t, []string{"customers.updated_at"}, se.Volatile)
	require.Contains(t, blame.Message(assert.CheckState(nil, once, assert.Options{})), "[twice] internal: CheckState: the once snapshot is nil")
}

// mustDiffState is assert.DiffState for comparisons that cannot break.
func mustDiffState(t *testing.T, once, twice *assert.Snapshot, opts assert.Options) []assert.TableDiff {
	t.Helper()
	diffs, err := assert.DiffState(once, twice, opts)
	require.NoError(t, err)
	return diffs
}
