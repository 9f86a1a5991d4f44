package assert_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/assert"
)

// numberedDocs is a table whose number embeds a sequence's value, drawn by the
// INSERT ('X-' || nextval('doc_seq')): the catalog cannot tell.
func numberedDocs(rows ...[]any) assert.Table {
	return assert.Table{
		Name: "docs",
		Columns: []assert.Column{
			{Name: "order_id", Type: "bigint"},
			{Name: "number", Type: "text"},
			{Name: "seq", Type: "bigint"},
		},
		Rows: rows,
	}
}

// lines refers to docs by its number.
func lines(rows ...[]any) assert.Table {
	return assert.Table{
		Name:    "doc_lines",
		Columns: []assert.Column{{Name: "number", Type: "text", References: "docs.number"}, {Name: "item", Type: "text"}},
		Rows:    rows,
	}
}

func seqs(pos ...assert.Sequence) []assert.Sequence { return pos }

func at(name string, last int64) assert.Sequence {
	return assert.Sequence{Name: name, Last: last, Called: true, Increment: 1}
}

func TestSequenceGaps(t *testing.T) {
	once := &assert.Snapshot{
		Tables:    []assert.Table{numberedDocs([]any{int64(1), "X-1", int64(100)}, []any{int64(2), "X-2", int64(101)})},
		Sequences: seqs(at("doc_seq", 2), at("other_seq", 101), at("idle_seq", 5)),
	}
	tests := []struct {
		name  string
		twice *assert.Snapshot
		opts  assert.Options
		want  []assert.SequenceGap // nil: no gap; a diff is expected unless quiet
		quiet bool                 // no difference at all
	}{
		{
			name: "a burnt value in text",
			twice: &assert.Snapshot{
				Tables:    []assert.Table{numberedDocs([]any{int64(1), "X-2", int64(100)}, []any{int64(2), "X-3", int64(101)})},
				Sequences: seqs(at("doc_seq", 3), at("other_seq", 101), at("idle_seq", 5)),
			},
			want: []assert.SequenceGap{{Column: "docs.number", Sequence: "doc_seq", Ahead: 1}},
		},
		{
			name: "named in SequenceColumns, it compares by rank",
			twice: &assert.Snapshot{
				Tables:    []assert.Table{numberedDocs([]any{int64(1), "X-2", int64(100)}, []any{int64(2), "X-3", int64(101)})},
				Sequences: seqs(at("doc_seq", 3), at("other_seq", 101), at("idle_seq", 5)),
			},
			opts:  assert.Options{SequenceColumns: []string{"docs.number"}},
			quiet: true,
		},
		{
			name: "an integer from an explicit nextval",
			twice: &assert.Snapshot{
				Tables:    []assert.Table{numberedDocs([]any{int64(1), "X-1", int64(102)}, []any{int64(2), "X-2", int64(103)})},
				Sequences: seqs(at("doc_seq", 2), at("other_seq", 103), at("idle_seq", 5)),
			},
			want: []assert.SequenceGap{{Column: "docs.seq", Sequence: "other_seq", Ahead: 2}},
		},
		{
			name: "the tightest of two advanced sequences",
			twice: &assert.Snapshot{
				Tables:    []assert.Table{numberedDocs([]any{int64(1), "X-2", int64(100)}, []any{int64(2), "X-3", int64(101)})},
				Sequences: seqs(at("doc_seq", 3), at("other_seq", 101), at("idle_seq", 9)),
			},
			want: []assert.SequenceGap{{Column: "docs.number", Sequence: "doc_seq", Ahead: 1}},
		},
		{
			name: "a gap wider than the sequence moved is no gap",
			twice: &assert.Snapshot{
				Tables:    []assert.Table{numberedDocs([]any{int64(1), "X-3", int64(100)}, []any{int64(2), "X-4", int64(101)})},
				Sequences: seqs(at("doc_seq", 3), at("other_seq", 101), at("idle_seq", 5)),
			},
		},
		{
			name: "no sequence moved",
			twice: &assert.Snapshot{
				Tables:    []assert.Table{numberedDocs([]any{int64(1), "X-2", int64(100)}, []any{int64(2), "X-3", int64(101)})},
				Sequences: seqs(at("doc_seq", 2), at("other_seq", 101), at("idle_seq", 5)),
			},
		},
		{
			name: "text that differs beyond its digits",
			twice: &assert.Snapshot{
				Tables:    []assert.Table{numberedDocs([]any{int64(1), "Y-2", int64(100)}, []any{int64(2), "X-3", int64(101)})},
				Sequences: seqs(at("doc_seq", 3), at("other_seq", 101), at("idle_seq", 5)),
			},
		},
		{
			name: "a snapshot without positions explains nothing",
			twice: &assert.Snapshot{
				Tables: []assert.Table{numberedDocs([]any{int64(1), "X-2", int64(100)}, []any{int64(2), "X-3", int64(101)})},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			diffs, err := assert.DiffState(once, tt.twice, tt.opts)
			require.NoError(t, err)
			if tt.quiet {
				require.Empty(t, diffs)
				return
			}
			require.Len(t, diffs, 1, "the numbers still differ")
			if diff := cmp.Diff(tt.want, diffs[0].Gaps); diff != "" {
				t.Errorf("gaps mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// The gap is said in one line under the diff, naming the column, the
// sequence and the option that quiets it.
func TestSequenceGapMessage(t *testing.T) {
	once := &assert.Snapshot{Tables: []assert.Table{numberedDocs([]any{int64(1), "X-1", int64(100)})}, Sequences: seqs(at("doc_seq", 1))}
	twice := &assert.Snapshot{Tables: []assert.Table{numberedDocs([]any{int64(1), "X-2", int64(100)})}, Sequences: seqs(at("doc_seq", 2))}
	err := assert.CheckState(once, twice, assert.Options{Label: "crash-mid-job"})
	require.Error(t, err)
	goldenText(t, "sequence_gap_explained", err.Error())
	last := err.Error()[strings.LastIndex(err.Error(), "\n")+1:]
	require.Equal(t, `docs.number differs only in numbers from sequence doc_seq, which a rolled-back attempt advanced 1 value past the clean run; SequenceColumns: "docs.number" compares it by rank, as serial columns are`, last)
}

// Ranks of numbered text follow the numbers, so "X-9" and "X-10" keep
// their order on both sides; a foreign key to the column follows its
// ranks.
func TestSequenceColumnsRankLikeSerials(t *testing.T) {
	once := snap(
		numberedDocs([]any{int64(1), "X-9", int64(1)}, []any{int64(2), "X-10", int64(2)}),
		lines([]any{"X-9", "pen"}, []any{"X-10", "ink"}),
	)
	twice := snap(
		numberedDocs([]any{int64(1), "X-10", int64(1)}, []any{int64(2), "X-11", int64(2)}),
		lines([]any{"X-10", "pen"}, []any{"X-11", "ink"}),
	)
	opts := assert.Options{SequenceColumns: []string{"docs.number"}}
	diffs, err := assert.DiffState(once, twice, opts)
	require.NoError(t, err)
	require.Empty(t, diffs)

	swapped := snap(
		numberedDocs([]any{int64(1), "X-10", int64(1)}, []any{int64(2), "X-11", int64(2)}),
		lines([]any{"X-11", "pen"}, []any{"X-10", "ink"}),
	)
	diffs, err = assert.DiffState(once, swapped, opts)
	require.NoError(t, err)
	require.Len(t, diffs, 1, "a line pointing at the other document differs")
	require.Equal(t, "doc_lines", diffs[0].Table)

	// The option leaves the snapshot as it was.
	require.False(t, once.Tables[0].Columns[1].Sequence)
}

// TakeSnapshot notes where each sequence stands, outside the reserved
// schema; one never drawn from is not Called.
func TestTakeSnapshotSequences(t *testing.T) {
	t.Parallel()
	conn := newDB(t, `
		CREATE SEQUENCE doc_seq;
		CREATE SEQUENCE idle_seq;
		CREATE SEQUENCE down_seq INCREMENT BY -2 MAXVALUE 100 START WITH 100;
		CREATE SCHEMA billing;
		CREATE SEQUENCE billing.invoice_numbers START WITH 1000;
		CREATE SCHEMA twice;
		CREATE SEQUENCE twice.own;
		CREATE TABLE docs (id serial, number text);
		INSERT INTO docs (number) VALUES ('X-' || nextval('doc_seq')), ('X-' || nextval('doc_seq'));
		SELECT nextval('down_seq'), nextval('down_seq'), nextval('billing.invoice_numbers'), nextval('twice.own');
	`)
	s := snapshot(t, conn)
	want := []assert.Sequence{
		{Name: "billing.invoice_numbers", Last: 1000, Called: true, Increment: 1},
		{Name: "doc_seq", Last: 2, Called: true, Increment: 1},
		{Name: "docs_id_seq", Last: 2, Called: true, Increment: 1},
		{Name: "down_seq", Last: 98, Called: true, Increment: -2},
		{Name: "idle_seq", Increment: 1},
	}
	if diff := cmp.Diff(want, s.Sequences); diff != "" {
		t.Errorf("sequences mismatch (-want +got):\n%s", diff)
	}
}

// A foreign key copying a numbered column shows the same gap, and the
// gap names the column to rank by: the one it points at.
func TestSequenceGapThroughForeignKey(t *testing.T) {
	once := &assert.Snapshot{
		Tables:    []assert.Table{numberedDocs([]any{int64(1), "X-1", int64(1)}), lines([]any{"X-1", "pen"})},
		Sequences: seqs(at("doc_seq", 1)),
	}
	twice := &assert.Snapshot{
		Tables:    []assert.Table{numberedDocs([]any{int64(1), "X-2", int64(1)}), lines([]any{"X-2", "pen"})},
		Sequences: seqs(at("doc_seq", 2)),
	}
	diffs, err := assert.DiffState(once, twice, assert.Options{})
	require.NoError(t, err)
	require.Len(t, diffs, 2)
	require.Equal(t, []assert.SequenceGap{{Column: "doc_lines.number", Sequence: "doc_seq", Ahead: 1, RankBy: "docs.number"}}, diffs[0].Gaps)
	require.Contains(t, diffs[0].String(), `SequenceColumns: "docs.number" compares it by rank`)
	require.Equal(t, []assert.SequenceGap{{Column: "docs.number", Sequence: "doc_seq", Ahead: 1}}, diffs[1].Gaps)

	diffs, err = assert.DiffState(once, twice, assert.Options{SequenceColumns: []string{"docs.number"}})
	require.NoError(t, err)
	require.Empty(t, diffs)
}
