package assert

import (
	"fmt"
	"slices"
	"strings"

	"github.com/google/go-cmp/cmp"

	"github.com/runtwice/twice/internal/text"
)

// Options tune DiffState. The zero value compares every column of every
// table exactly.
type Options struct {
	// Label names the scenario in the diff header: "run-twice" gives
	// `table "orders" after run-twice mismatch (-once +twice):`.
	Label string
	// IgnoreTables are left out of the comparison, by Table.Name.
	IgnoreTables []string
	// IgnoreColumns are left out of the comparison: "table.column" for one
	// table, "column" for every table that has it, or a path inside a
	// json/jsonb (or array) column of one table, "table.column.key.sub"
	// (array elements by index: "orders.items.0.price"), which leaves out
	// that value and compares the rest of the document.
	IgnoreColumns []string
	// Volatile are the "table.column"s and "table.column.key" paths
	// VolatileColumns found; they are left out like IgnoreColumns, and
	// StateError names them.
	Volatile []string
	// CmpOptions are passed to go-cmp as they are. Each row is a
	// map[string]any keyed by column name; sequence-drawn values and the
	// foreign keys pointing at them are ranks (printed s"#1").
	CmpOptions []cmp.Option
	// SequenceColumns are "table.column"s whose values are drawn from a
	// sequence in a way the catalog does not show (an explicit nextval in
	// the INSERT, or a number inside text: 'X-' || nextval('doc_seq')).
	// They compare by rank, as serial and identity columns do, and so do
	// the foreign keys pointing at them. Left out, a difference that is
	// only such a sequence's gap is still shown, and TableDiff.Gaps
	// explains it.
	SequenceColumns []string
}

// TableDiff is how one table differs between two snapshots.
type TableDiff struct {
	Label string // Options.Label
	Table string // Table.Name
	// Diff is go-cmp style, (-once +twice).
	Diff string
	// Gaps explain the columns whose values differ only in numbers drawn
	// from a sequence the scenario advanced further than the clean run.
	Gaps []SequenceGap `json:",omitempty"`
}

// String returns the diff under its header, then a line per gap:
//
//	table "customers" after run-twice mismatch (-once +twice):
//	  []map[string]any{ ...
func (d TableDiff) String() string {
	after := ""
	if d.Label != "" {
		after = " after " + d.Label
	}
	var b strings.Builder
	fmt.Fprintf(&b, "table %q%s mismatch (-once +twice):\n%s", d.Table, after, strings.TrimRight(d.Diff, "\n"))
	for _, g := range d.Gaps {
		b.WriteString("\n" + g.String())
	}
	return b.String()
}

// maxShownRows bounds how many differing rows one TableDiff prints.
const maxShownRows = 50

// maxMatchPairs bounds the row pairs DiffState tries with go-cmp when
// CmpOptions may equate rows whose values differ.
const maxMatchPairs = 250_000

// DiffState compares two snapshots table by table and returns the tables
// that differ, sorted by name; none means the states are equal.
//
// Rows compare as multisets: their order does not matter, duplicates do.
// Sequence-drawn values and foreign keys pointing at them compare by rank
// (see Column.Sequence and Options.SequenceColumns). A table that exists
// on one side only differs, even when empty. A nil Snapshot has no
// tables. A column whose values differ only in numbers drawn from a
// sequence the scenario advanced further (Snapshot.Sequences) is
// explained in TableDiff.Gaps. Tables read in part (Table.Written) are
// compared over the keys either side wrote (see Align).
//
// The error is not a difference: it says the comparison itself broke
// (Options.CmpOptions made go-cmp panic: a *ComparerPanic), twice's own
// unless the caller says the options were its user's.
func DiffState(once, twice *Snapshot, opts Options) ([]TableDiff, error) {
	once, twice = Align(once, twice)
	f := newFilter(opts)
	ahead := sequencesAhead(once, twice)
	once, twice = withSequenceColumns(once, opts.SequenceColumns), withSequenceColumns(twice, opts.SequenceColumns)
	shared := sharedTables(once, twice)
	ro, rt := renumbered(once, shared), renumbered(twice, shared)
	var names []string
	for _, s := range []*Snapshot{once, twice} {
		if s == nil {
			continue
		}
		for _, t := range s.Tables {
			if !f.tables[t.Name] && !shared[t.Name] {
				names = append(names, t.Name)
			}
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	var diffs []TableDiff
	for _, name := range names {
		to, tt := once.table(name), twice.table(name)
		d, gaps, err := diffTable(name, to, ro[name], tt, rt[name], f, opts.CmpOptions, ahead)
		if err != nil {
			return nil, err
		}
		if d != "" {
			for i := range gaps {
				_, column, _ := splitColumnRef(gaps[i].Column)
				if by := either(once, twice).rankBy(name, column); by != gaps[i].Column {
					gaps[i].RankBy = by
				}
			}
			diffs = append(diffs, TableDiff{Label: opts.Label, Table: name, Diff: d, Gaps: gaps})
		}
	}
	return diffs, nil
}

// sharedTables names the tables whose rows once and twice share, as
// Snapshotter.TakeChanged gives the tables neither side changed: equal
// by construction, so neither compared nor renumbered. Their columns
// must match too (SequenceColumns may mark one side's only).
func sharedTables(once, twice *Snapshot) map[string]bool {
	if once == nil || twice == nil {
		return nil
	}
	var shared map[string]bool
	for i := range once.Tables {
		a := &once.Tables[i]
		b := twice.table(a.Name)
		if b == nil || len(a.Rows) == 0 || len(a.Rows) != len(b.Rows) || &a.Rows[0] != &b.Rows[0] || !slices.Equal(a.Columns, b.Columns) {
			continue
		}
		if shared == nil {
			shared = map[string]bool{}
		}
		shared[a.Name] = true
	}
	return shared
}

// filter says which tables, columns and paths inside columns are left
// out.
type filter struct {
	tables  map[string]bool
	columns map[string]bool // "table.column" and "column"
	entries [][]string      // IgnoreColumns and Volatile, for their paths
}

func newFilter(opts Options) filter {
	f := filter{tables: map[string]bool{}, columns: map[string]bool{}}
	for _, t := range opts.IgnoreTables {
		f.tables[t] = true
	}
	for _, c := range opts.IgnoreColumns {
		f.columns[c] = true
	}
	for _, c := range opts.Volatile {
		f.columns[c] = true
	}
	f.entries = [][]string{opts.IgnoreColumns, opts.Volatile}
	return f
}

// paths returns, per column of cols, the paths inside its values that are
// left out.
func (f filter) paths(table string, cols []string) [][][]string {
	var out [][][]string
	for i, c := range cols {
		if p := pathsUnder(table+"."+c, f.entries...); len(p) > 0 {
			if out == nil {
				out = make([][][]string, len(cols))
			}
			out[i] = p
		}
	}
	return out
}

func (f filter) dropColumn(table, column string) bool {
	return f.columns[column] || f.columns[table+"."+column]
}

// rowView is one row as compared and printed.
type rowView struct {
	vals    []any // the compared columns' values, in column order
	present []bool
	key     string // equal rows have equal keys
}

// asMap is the row as go-cmp sees and prints it: column name -> value.
func (v *rowView) asMap(cols []string) map[string]any {
	m := make(map[string]any, len(cols))
	for i, c := range cols {
		if v.present[i] {
			m[c] = v.vals[i]
		}
	}
	return m
}

func compareRowViews(a, b rowView) int { return compareRows(a.vals, b.vals) }

// columnsOf returns the compared columns of a table present on either
// side: once's in order, then twice's extra ones.
func columnsOf(table string, f filter, ts ...*Table) []string {
	var cols []string
	seen := map[string]bool{}
	for _, t := range ts {
		if t == nil {
			continue
		}
		for _, c := range t.Columns {
			if !seen[c.Name] && !f.dropColumn(table, c.Name) {
				seen[c.Name] = true
				cols = append(cols, c.Name)
			}
		}
	}
	return cols
}

// rowViews makes the compared rows; drop, when not nil, holds per column
// the paths left out of its values.
func rowViews(t *Table, rows [][]any, cols []string, drop [][][]string) []rowView {
	if t == nil {
		return nil
	}
	pos := make([]int, len(cols)) // index in t.Columns, -1 when t lacks it
	for i, name := range cols {
		pos[i] = slices.IndexFunc(t.Columns, func(c Column) bool { return c.Name == name })
	}
	out := make([]rowView, len(rows))
	var key []byte
	vals := make([]any, len(rows)*len(cols))
	present := make([]bool, len(rows)*len(cols))
	for j, r := range rows {
		v := rowView{vals: vals[j*len(cols) : (j+1)*len(cols)], present: present[j*len(cols) : (j+1)*len(cols)]}
		key = key[:0]
		for i, p := range pos {
			if p < 0 || p >= len(r) {
				key = append(key, '!')
				continue
			}
			v.vals[i], v.present[i] = r[p], true
			if drop != nil && drop[i] != nil {
				v.vals[i] = withoutPaths(r[p], drop[i])
			}
			key = appendKey(key, v.vals[i])
			key = append(key, ';')
		}
		v.key = string(key)
		out[j] = v
	}
	return out
}

// entry is one line group of a table diff: a removed row, an inserted row,
// or a pair printed as one modified row.
type entry struct {
	once, twice *rowView
}

func (e entry) sortRow() *rowView {
	if e.once != nil {
		return e.once
	}
	return e.twice
}

func diffTable(name string, to *Table, ro [][]any, tt *Table, rt [][]any, f filter, opts []cmp.Option, ahead []sequenceAhead) (diff string, gaps []SequenceGap, err error) {
	defer func() {
		if r := recover(); r != nil {
			diff, gaps, err = "", nil, &ComparerPanic{Table: name, Value: r}
		}
	}()
	cols := columnsOf(name, f, to, tt)
	drop := f.paths(name, cols)
	vo, vt := rowViews(to, ro, cols, drop), rowViews(tt, rt, cols, drop)
	onlyOnce, onlyTwice, identical := subtractEqual(vo, vt)
	// Sorted before pairing so the output does not depend on read order.
	slices.SortStableFunc(onlyOnce, compareRowViews)
	slices.SortStableFunc(onlyTwice, compareRowViews)
	if len(opts) > 0 {
		var n int
		onlyOnce, onlyTwice, n = subtractCmpEqual(onlyOnce, onlyTwice, cols, opts)
		identical += n
	}
	entries := pairSimilar(onlyOnce, onlyTwice)
	var body []string
	var differing []entry // what gaps may explain
	shown, rest := 0, 0
	for i, e := range entries {
		if shown == maxShownRows {
			rest = countRows(entries[i:])
			differing = append(differing, entries[i:]...)
			break
		}
		lines := renderEntry(e, cols, opts)
		if lines == nil { // equal under opts after all
			identical++
			continue
		}
		body = append(body, lines...)
		differing = append(differing, e)
		shown++
	}
	missing := ""
	switch {
	case to == nil:
		missing = fmt.Sprintf("  // table %q does not exist in -once\n", name)
	case tt == nil:
		missing = fmt.Sprintf("  // table %q does not exist in +twice\n", name)
	}
	if len(body) == 0 && missing == "" {
		return "", nil, nil
	}
	gaps = sequenceGaps(name, cols, differing, ahead)
	var b strings.Builder
	b.WriteString(missing)
	if len(body) == 0 && identical == 0 {
		b.WriteString("  []map[string]any{}\n")
		return b.String(), gaps, nil
	}
	b.WriteString("  []map[string]any{\n")
	if identical > 0 {
		fmt.Fprintf(&b, "  \t... // %d identical %s\n", identical, text.Plural(identical, "row"))
	}
	for _, l := range body {
		b.WriteString(l)
		b.WriteString("\n")
	}
	if rest > 0 {
		fmt.Fprintf(&b, "  \t... // %d more differing %s not shown\n", rest, text.Plural(rest, "row"))
	}
	b.WriteString("  }\n")
	return b.String(), gaps, nil
}

func countRows(es []entry) int {
	c := 0
	for _, e := range es {
		if e.once != nil {
			c++
		}
		if e.twice != nil {
			c++
		}
	}
	return c
}

// subtractEqual removes the rows both sides have, as a multiset.
func subtractEqual(vo, vt []rowView) (onlyOnce, onlyTwice []rowView, identical int) {
	count := make(map[string]int, len(vt))
	for _, v := range vt {
		count[v.key]++
	}
	for _, v := range vo {
		if count[v.key] > 0 {
			count[v.key]--
			identical++
			continue
		}
		onlyOnce = append(onlyOnce, v)
	}
	// Rows with one key are equal, so which of them remain does not matter.
	for _, v := range vt {
		if count[v.key] > 0 {
			count[v.key]--
			onlyTwice = append(onlyTwice, v)
		}
	}
	return onlyOnce, onlyTwice, identical
}

// subtractCmpEqual removes the row pairs go-cmp calls equal under opts,
// first come first served; past maxMatchPairs it leaves the rows as they
// are.
func subtractCmpEqual(vo, vt []rowView, cols []string, opts []cmp.Option) (onlyOnce, onlyTwice []rowView, identical int) {
	if len(vo) == 0 || len(vt) == 0 || len(vo)*len(vt) > maxMatchPairs {
		return vo, vt, 0
	}
	mt := make([]map[string]any, len(vt))
	for j := range vt {
		mt[j] = vt[j].asMap(cols)
	}
	used := make([]bool, len(vt))
	for _, o := range vo {
		matched := false
		mo := o.asMap(cols)
		for j := range vt {
			if !used[j] && cmp.Equal(mo, mt[j], opts...) {
				used[j], matched = true, true
				identical++
				break
			}
		}
		if !matched {
			onlyOnce = append(onlyOnce, o)
		}
	}
	for j, t := range vt {
		if !used[j] {
			onlyTwice = append(onlyTwice, t)
		}
	}
	return onlyOnce, onlyTwice, identical
}

// pairSimilar pairs each removed row with the most similar inserted row,
// by go-cmp's own measure (equal columns + 1 >= differing columns), so a
// changed field prints as a modified row; the rest print as removed or
// inserted. Entries come in canonical row order.
func pairSimilar(vo, vt []rowView) []entry {
	var es []entry
	used := make([]bool, len(vt))
	tryPairs := len(vo)*len(vt) <= maxMatchPairs
	for i := range vo {
		best, bestSame := -1, -1
		if tryPairs {
			for j := range vt {
				if used[j] {
					continue
				}
				same, differ := similarity(&vo[i], &vt[j])
				if same+1 >= differ && same > bestSame {
					best, bestSame = j, same
				}
			}
		}
		if best < 0 {
			es = append(es, entry{once: &vo[i]})
			continue
		}
		used[best] = true
		es = append(es, entry{once: &vo[i], twice: &vt[best]})
	}
	for j := range vt {
		if !used[j] {
			es = append(es, entry{twice: &vt[j]})
		}
	}
	slices.SortStableFunc(es, func(a, b entry) int { return compareRowViews(*a.sortRow(), *b.sortRow()) })
	return es
}

func similarity(a, b *rowView) (same, differ int) {
	for i := range a.vals {
		if a.present[i] == b.present[i] && valueKey(a.vals[i]) == valueKey(b.vals[i]) {
			same++
		} else {
			differ++
		}
	}
	return same, differ
}

// renderEntry prints one entry as go-cmp does inside a slice of rows; nil
// when go-cmp finds the pair equal under opts.
func renderEntry(e entry, cols []string, opts []cmp.Option) []string {
	x, y := []map[string]any{}, []map[string]any{}
	if e.once != nil {
		x = append(x, e.once.asMap(cols))
	}
	if e.twice != nil {
		y = append(y, e.twice.asMap(cols))
	}
	if e.once == nil || e.twice == nil {
		opts = nil // a row against no row: user options have nothing to equate
	}
	d := cmp.Diff(x, y, opts...)
	if d == "" {
		return nil
	}
	// go-cmp indents with U+00A0 at random to discourage golden tests of
	// its output; reports want plain spaces.
	d = strings.ReplaceAll(d, "\u00a0", " ")
	lines := strings.Split(strings.TrimRight(d, "\n"), "\n")
	if len(lines) < 3 {
		return lines
	}
	return lines[1 : len(lines)-1] // drop go-cmp's own []map[string]any{ and }
}

// VolatileColumns returns the "table.column"s, sorted, whose values differ
// between two clean reference runs of the same job: now(), random UUIDs,
// anything the handler does not determine. Each column compares as a
// multiset of values, after renumbering; a table whose row count differs
// makes all its columns volatile. Tables or columns on one side only are
// not volatile: DiffState reports them.
//
// In a column holding JSON documents (json, jsonb, arrays), only the paths
// that differ are volatile, named "table.column.key.sub" (array elements
// by index), and the rest of each document is still compared. The rows of
// the two runs are paired by their other, non-volatile columns for that.
// A key only one run wrote is volatile; where values differ in type, or
// arrays in length, the value holding the difference is volatile whole.
func VolatileColumns(ref1, ref2 *Snapshot) []string {
	ref1, ref2 = Align(ref1, ref2)
	shared := sharedTables(ref1, ref2)
	r1, r2 := renumbered(ref1, shared), renumbered(ref2, shared)
	var out []string
	if ref1 == nil || ref2 == nil {
		return nil
	}
	for _, t1 := range ref1.Tables {
		t2 := ref2.table(t1.Name)
		if t2 == nil || shared[t1.Name] {
			continue
		}
		var cols []string // on both sides
		var pos [][2]int  // their indexes in t1 and t2
		var differ []bool // whose values differ
		for i1, c := range t1.Columns {
			i2 := slices.IndexFunc(t2.Columns, func(c2 Column) bool { return c2.Name == c.Name })
			if i2 < 0 {
				continue
			}
			cols = append(cols, c.Name)
			pos = append(pos, [2]int{i1, i2})
			differ = append(differ, !slices.Equal(columnKeys(r1[t1.Name], i1), columnKeys(r2[t1.Name], i2)))
		}
		rows1, rows2 := r1[t1.Name], r2[t1.Name]
		var paired [][2][]any
		for i, c := range cols {
			if !differ[i] {
				continue
			}
			name := t1.Name + "." + c
			if len(rows1) != len(rows2) || len(rows1) == 0 {
				out = append(out, name)
				continue
			}
			if paired == nil {
				paired = pairRows(rows1, rows2, pos, differ)
			}
			var paths [][]string
			for _, pr := range paired {
				paths = append(paths, differingPaths(at(pr[0], pos[i][0]), at(pr[1], pos[i][1]))...)
			}
			for _, p := range outermost(paths) {
				if len(p) == 0 {
					out = append(out, name)
					break
				}
				out = append(out, name+"."+strings.Join(p, "."))
			}
		}
	}
	slices.Sort(out)
	return out
}

// pairRows pairs the rows of two runs of one table, each side sorted by
// the columns whose values do not differ, so that, where those identify a
// row, each row meets its counterpart.
func pairRows(rows1, rows2 [][]any, pos [][2]int, differ []bool) [][2][]any {
	sorted := func(rows [][]any, side int) [][]any {
		out := slices.Clone(rows)
		slices.SortStableFunc(out, func(a, b []any) int {
			for i, p := range pos {
				if differ[i] {
					continue
				}
				if c := compareValues(at(a, p[side]), at(b, p[side])); c != 0 {
					return c
				}
			}
			return 0
		})
		return out
	}
	s1, s2 := sorted(rows1, 0), sorted(rows2, 1)
	out := make([][2][]any, len(s1))
	for i := range s1 {
		out[i] = [2][]any{s1[i], s2[i]}
	}
	return out
}

func at(row []any, i int) any {
	if i < len(row) {
		return row[i]
	}
	return nil
}

func columnKeys(rows [][]any, i int) []string {
	keys := make([]string, len(rows))
	for j, r := range rows {
		if i < len(r) {
			keys[j] = valueKey(r[i])
		}
	}
	slices.Sort(keys)
	return keys
}

// either is the first snapshot that is not nil.
func either(a, b *Snapshot) *Snapshot {
	if a != nil {
		return a
	}
	return b
}

// ComparerPanic is the error DiffState returns when go-cmp panicked
// comparing a table, which an option of Options.CmpOptions makes it do:
// the caller's option broke, not the comparison, so a caller that takes
// the options from its own user (harness.Config.CmpOptions) says so in
// that user's words.
type ComparerPanic struct {
	// Table is the table being compared; Value what go-cmp panicked with.
	Table string
	Value any
}

func (e *ComparerPanic) Error() string {
	return fmt.Sprintf("go-cmp panicked comparing table %q; check Options.CmpOptions: %v", e.Table, e.Value)
}
