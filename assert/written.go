package assert

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/internal/history"
)

// Written says that a table of a Snapshot was read in part: its Rows are
// only those under a primary key the database's write history holds a
// write of (the rows the run inserted, updated or deleted, as they are
// now), and Before is what the template held under those keys. Every
// other row is the template's, on this side and on any other snapshot of
// a copy of the same template that did not write it; DiffState and
// VolatileColumns compare the two sides over the keys either wrote, so
// the rows neither touched are never read. See Snapshotter.PartialFrom.
type Written struct {
	// Key holds the indexes in the table's Columns of its primary key's
	// columns.
	Key []int
	// Before holds the template's rows under the keys written, in
	// canonical order; a key the run inserted had none.
	Before [][]any `json:",omitempty"`
}

// partialSource is how a table is read in part: the indexes of its key's
// columns, and the queries of its current rows and of its template rows
// under the keys written.
type partialSource struct {
	key             []int
	current, before string
}

// catalogPartialSQL lists the tables a snapshot may read in part: plain
// tables, not partitions and not inheritance parents (the history notes a
// row under the table that holds it), whose main fork is at least $1
// bytes, with a primary key and the history's row trigger.
const catalogPartialSQL = `
SELECT n.nspname, c.relname,
	(SELECT array_agg(a.attname::text ORDER BY k.ord) FROM pg_index i CROSS JOIN unnest(i.indkey) WITH ORDINALITY k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indrelid = c.oid AND i.indisprimary)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND NOT c.relispartition AND pg_relation_size(c.oid) >= $1
	AND NOT EXISTS (SELECT FROM pg_inherits WHERE inhparent = c.oid)
	AND EXISTS (SELECT FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)
	AND EXISTS (SELECT FROM pg_trigger g WHERE g.tgrelid = c.oid AND g.tgname = 'twice_history' AND g.tgenabled = 'O')`

// readPartial marks, in plan, the tables of at least from bytes that are
// read in part.
func readPartial(ctx context.Context, q Querier, plan *snapshotPlan, from int64) error {
	rows, err := q.Query(ctx, catalogPartialSQL, from)
	if err != nil {
		return fmt.Errorf("snapshot: listing the tables read in part: %w", err)
	}
	byName := map[string][]string{} // table -> its key's columns
	for rows.Next() {
		var schema, rel string
		var key []string
		if err := rows.Scan(&schema, &rel, &key); err != nil {
			rows.Close()
			return fmt.Errorf("snapshot: listing the tables read in part: %w", err)
		}
		byName[tableName(schema, rel)] = key
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("snapshot: listing the tables read in part: %w", err)
	}
	for i := range plan.sources {
		t, src := &plan.tables[i], &plan.sources[i]
		key, ok := byName[t.Name]
		if !ok {
			continue
		}
		p := &partialSource{}
		quoted := make([]string, len(key))
		for j, k := range key {
			at := slices.IndexFunc(t.Columns, func(col Column) bool { return col.Name == k })
			if at < 0 {
				p = nil
				break
			}
			p.key = append(p.key, at)
			quoted[j] = pgx.Identifier{k}.Sanitize()
		}
		if p == nil {
			continue
		}
		h := history.Table{Name: pgx.Identifier{src.schema, src.rel}.Sanitize(), Key: quoted}
		list := selectList(*t, *src)
		p.current, p.before = h.Current(list), h.Before(list)
		src.partial = p
	}
	return nil
}

// selectList is the select list reading t's columns as newDest scans
// them.
func selectList(t Table, src tableSource) string {
	exprs := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		exprs[i] = selectExpr(pgx.Identifier{c.Name}.Sanitize(), src.plans[i].kind)
	}
	return strings.Join(exprs, ", ")
}

// Align returns a and b with every table one of them read in part
// (Written) made whole over the keys either side wrote: each side holds,
// under a key it did not write, the template's row the other side read as
// its Before. Rows neither side wrote are the template's on both and left
// out of both. A table read in part on one side and whole on the other
// (a handler ran DDL on one side only) takes, on the partial side, the
// whole side's rows under the keys it did not write: what the whole side
// changed there is not seen. DiffState and VolatileColumns align their
// snapshots themselves; Align is for a caller that reads rows of two
// snapshots side by side.
func Align(a, b *Snapshot) (*Snapshot, *Snapshot) {
	if a == nil || b == nil || (!a.partial() && !b.partial()) {
		return a, b
	}
	ra, rb := &Snapshot{Sequences: a.Sequences}, &Snapshot{Sequences: b.Sequences}
	ra.Tables, rb.Tables = slices.Clone(a.Tables), slices.Clone(b.Tables)
	for i := range ra.Tables {
		ta := &ra.Tables[i]
		tb := rb.table(ta.Name)
		switch {
		case tb == nil:
			ta.Written = nil
		case ta.Written != nil && tb.Written != nil:
			ka, kb := writtenKeys(ta), writtenKeys(tb)
			rowsA := fillFrom(ta.Rows, tb.Written.Before, tb.Written.Key, ka)
			rowsB := fillFrom(tb.Rows, ta.Written.Before, ta.Written.Key, kb)
			ta.Rows, tb.Rows, ta.Written, tb.Written = rowsA, rowsB, nil, nil
		case ta.Written != nil:
			ta.Rows, ta.Written = fillFrom(ta.Rows, tb.Rows, ta.Written.Key, writtenKeys(ta)), nil
		case tb.Written != nil:
			tb.Rows, tb.Written = fillFrom(tb.Rows, ta.Rows, tb.Written.Key, writtenKeys(tb)), nil
		}
	}
	for i := range rb.Tables {
		rb.Tables[i].Written = nil
	}
	return ra, rb
}

// partial says a table of s was read in part.
func (s *Snapshot) partial() bool {
	return slices.ContainsFunc(s.Tables, func(t Table) bool { return t.Written != nil })
}

// writtenKeys are the keys of a table read in part that its run wrote:
// those of its rows now and of its template rows. A key inserted and
// deleted again is in neither, and is the template's (no row) as well.
func writtenKeys(t *Table) map[string]bool {
	keys := map[string]bool{}
	for _, rows := range [][][]any{t.Rows, t.Written.Before} {
		for _, r := range rows {
			keys[rowKey(r, t.Written.Key)] = true
		}
	}
	return keys
}

// fillFrom is rows with every row of other whose key (its columns at key)
// is not in own added, in canonical order.
func fillFrom(rows, other [][]any, key []int, own map[string]bool) [][]any {
	out := slices.Clone(rows)
	for _, r := range other {
		if !own[rowKey(r, key)] {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, compareRows)
	return out
}

// rowKey is the values of row at key, as one comparable string.
func rowKey(row []any, key []int) string {
	var b []byte
	for _, i := range key {
		b = appendKey(b, at(row, i))
		b = append(b, 0)
	}
	return string(b)
}
