package assert

import "slices"

// maxReferenceDepth bounds how far a foreign key is followed to the
// sequence-drawn column it ultimately points at.
const maxReferenceDepth = 8

// renumbered returns each table's rows with sequence-drawn values, and the
// foreign keys pointing at them, replaced by their rank on this side: the
// smallest value of the column becomes #1. Rolled-back attempts burn
// sequence values, so raw ids differ between runs that wrote the same rows;
// ranks do not. A foreign key value with no match in the referenced column
// (a missing table, a NOT VALID constraint) keeps its raw value.
func renumbered(s *Snapshot, skip map[string]bool) map[string][][]any {
	if s == nil {
		return nil
	}
	// Ranks are made only for the columns a table compared here needs:
	// a big table both sides share is neither compared nor ranked, unless
	// a compared table's foreign key points at it.
	ranks := map[string]*rankMap{}
	rankOf := func(src string) (*rankMap, bool) {
		if m, ok := ranks[src]; ok {
			return m, m != nil
		}
		var m *rankMap
		if tn, cn, ok := splitColumnRef(src); ok {
			if t := s.table(tn); t != nil {
				if i := slices.IndexFunc(t.Columns, func(c Column) bool { return c.Name == cn && c.Sequence }); i >= 0 {
					r := ranksOf(t.Rows, i)
					m = &r
				}
			}
		}
		ranks[src] = m
		return m, m != nil
	}
	out := make(map[string][][]any, len(s.Tables))
	for _, t := range s.Tables {
		if skip[t.Name] {
			continue
		}
		maps := make([]*rankMap, len(t.Columns))
		mapped := false
		for i := range t.Columns {
			if src := s.sequenceSource(t.Name, &t.Columns[i], 0); src != "" {
				if m, ok := rankOf(src); ok {
					maps[i], mapped = m, true
				}
			}
		}
		if !mapped {
			out[t.Name] = t.Rows
			continue
		}
		rows := make([][]any, len(t.Rows))
		backing := make([]any, 0, len(t.Rows)*len(t.Columns))
		for j, r := range t.Rows {
			backing = append(backing, r...)
			nr := backing[len(backing)-len(r):]
			for i, m := range maps {
				if m == nil || i >= len(nr) || nr[i] == nil {
					continue
				}
				if rk, ok := m.lookup(nr[i]); ok {
					nr[i] = rk
				}
			}
			rows[j] = nr
		}
		out[t.Name] = rows
	}
	return out
}

// rankMap maps a column's raw values to their ranks.
type rankMap struct {
	ints   map[int64]rank // serial and identity values: no hashing of interfaces
	others map[string]rank
}

func (m *rankMap) lookup(v any) (rank, bool) {
	if n, ok := v.(int64); ok {
		r, ok := m.ints[n]
		return r, ok
	}
	r, ok := m.others[valueKey(v)]
	return r, ok
}

// ranksOf numbers the distinct non-NULL values of column i: the smallest
// is #1.
func ranksOf(rows [][]any, i int) rankMap {
	var vals []any
	for _, r := range rows {
		if i < len(r) && r[i] != nil {
			vals = append(vals, r[i])
		}
	}
	slices.SortFunc(vals, compareValues)
	m := rankMap{ints: make(map[int64]rank, len(vals)), others: map[string]rank{}}
	next := rank(1)
	for _, v := range vals {
		if n, ok := v.(int64); ok {
			if _, seen := m.ints[n]; !seen {
				m.ints[n], next = next, next+1
			}
			continue
		}
		if k := valueKey(v); m.others[k] == 0 {
			m.others[k], next = next, next+1
		}
	}
	return m
}

// withSequenceColumns returns s with the "table.column"s in extra marked
// as drawn from a sequence, for a column the catalog cannot tell is (an
// explicit nextval in the INSERT, a number inside text). s itself is left
// as it is; rows are shared.
func withSequenceColumns(s *Snapshot, extra []string) *Snapshot {
	if s == nil || len(extra) == 0 {
		return s
	}
	c := &Snapshot{Tables: slices.Clone(s.Tables), Sequences: s.Sequences}
	for i := range c.Tables {
		t := &c.Tables[i]
		cloned := false
		for j := range t.Columns {
			if t.Columns[j].Sequence || !slices.Contains(extra, t.Name+"."+t.Columns[j].Name) {
				continue
			}
			if !cloned {
				t.Columns, cloned = slices.Clone(t.Columns), true
			}
			t.Columns[j].Sequence = true
		}
	}
	return c
}

// sequenceSource returns the "table.column" whose ranks renumber c: c
// itself when it is drawn from a sequence, else what its foreign key points
// at, followed transitively; "" when there is none.
func (s *Snapshot) sequenceSource(table string, c *Column, depth int) string {
	if c.Sequence {
		return table + "." + c.Name
	}
	if c.References == "" || depth >= maxReferenceDepth {
		return ""
	}
	tt, tc, ok := splitColumnRef(c.References)
	if !ok {
		return ""
	}
	target := s.column(tt, tc)
	if target == nil {
		return ""
	}
	return s.sequenceSource(tt, target, depth+1)
}
