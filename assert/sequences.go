package assert

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Sequence is where one sequence stood when a snapshot was taken. A
// sequence's position is not state: DiffState never compares it. It
// explains a difference: a value drawn from a sequence the scenario
// advanced further than the clean run (a rolled-back attempt burnt values)
// differs by the gap, and SequenceGap names the sequence.
type Sequence struct {
	// Name is the sequence's name, qualified by its schema outside
	// public: "doc_seq", "billing.invoice_numbers".
	Name string
	// Last is the last value drawn, when Called; Called is false while
	// no value has been drawn since the sequence was created or set back.
	Last   int64
	Called bool
	// Increment is the sequence's step, 1 unless it says otherwise.
	Increment int64
}

// catalogSequencesSQL lists the sequences outside system schemas, the
// reserved schema and extensions, and whether the user may read their
// positions.
const catalogSequencesSQL = `
SELECT n.nspname, c.relname, c.oid::int8, has_sequence_privilege(c.oid, 'SELECT,USAGE'), s.seqincrement
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_sequence s ON s.seqrelid = c.oid
WHERE c.relkind = 'S'
	AND n.nspname NOT LIKE 'pg\_%' AND n.nspname NOT IN ('information_schema', '` + ReservedSchema + `')
	AND NOT EXISTS (
		SELECT 1 FROM pg_depend e
		WHERE e.classid = 'pg_class'::regclass AND e.objid = c.oid AND e.deptype = 'e')`

// sequenceValuesSQL reads the last values drawn from the sequences $1
// names, in that order; NULL where none was drawn since the sequence was
// created or set back.
const sequenceValuesSQL = `SELECT pg_sequence_last_value(s) FROM unnest($1::oid[]) WITH ORDINALITY AS u(s, i) ORDER BY i`

// sequenceSource is what a snapshot needs to read one sequence.
type sequenceSource struct {
	Sequence // without a position
	oid      uint32
	readable bool // the user may read its position
}

// readSequenceCatalog lists the sequences, sorted by qualified name as
// tables are ("public.b" shows as "b").
func readSequenceCatalog(ctx context.Context, q Querier) ([]sequenceSource, error) {
	rows, err := q.Query(ctx, catalogSequencesSQL)
	if err != nil {
		return nil, fmt.Errorf("snapshot: listing sequences: %w", err)
	}
	defer rows.Close()
	var seqs []sequenceSource
	for rows.Next() {
		var schema, rel string
		var oid, inc int64
		var readable bool
		if err := rows.Scan(&schema, &rel, &oid, &readable, &inc); err != nil {
			return nil, fmt.Errorf("snapshot: listing sequences: %w", err)
		}
		seqs = append(seqs, sequenceSource{Sequence: Sequence{Name: tableName(schema, rel), Increment: inc}, oid: uint32(oid), readable: readable})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("snapshot: listing sequences: %w", err)
	}
	slices.SortFunc(seqs, func(a, b sequenceSource) int { return strings.Compare(a.Name, b.Name) })
	return seqs, nil
}

// sequenceOIDs are the sequences whose positions sequenceValuesSQL reads:
// those the user may read.
func sequenceOIDs(seqs []sequenceSource) []uint32 {
	oids := []uint32{}
	for _, s := range seqs {
		if s.readable {
			oids = append(oids, s.oid)
		}
	}
	return oids
}

func readSequenceValues(ctx context.Context, q Querier, seqs []sequenceSource, snap *Snapshot) error {
	if len(seqs) == 0 {
		return nil
	}
	rows, err := q.Query(ctx, sequenceValuesSQL, sequenceOIDs(seqs))
	return scanSequenceValues(rows, err, seqs, snap)
}

// scanSequenceValues notes in snap where each sequence stood, from the
// result of sequenceValuesSQL.
func scanSequenceValues(rows pgx.Rows, err error, seqs []sequenceSource, snap *Snapshot) error {
	var lasts []*int64
	if err == nil {
		lasts, err = pgx.CollectRows(rows, pgx.RowTo[*int64])
	}
	if err == nil && len(lasts) != len(sequenceOIDs(seqs)) {
		err = fmt.Errorf("%d positions for %d sequences; were sequences dropped?", len(lasts), len(sequenceOIDs(seqs)))
	}
	if err != nil {
		return fmt.Errorf("snapshot: reading sequences: %w", err)
	}
	snap.Sequences = make([]Sequence, len(seqs))
	for i, s := range seqs {
		snap.Sequences[i] = s.Sequence
		if !s.readable {
			continue
		}
		if last := lasts[0]; last != nil {
			snap.Sequences[i].Last, snap.Sequences[i].Called = *last, true
		}
		lasts = lasts[1:]
	}
	return nil
}

// SequenceGap explains a column whose values differ from the clean run's
// only in numbers drawn from one sequence, which the scenario advanced
// further than the clean run: an attempt that rolled back burnt values,
// so every later value is higher by the gap ("X-2" for "X-1"). Serial and
// identity columns compare by rank and never show such a gap; a column
// that takes its values from a sequence some other way (an explicit
// nextval, a number inside text: 'X-' || nextval('doc_seq')) does, until
// Options.SequenceColumns names it.
type SequenceGap struct {
	// Column is "table.column".
	Column string
	// Sequence is the sequence the numbers came from.
	Sequence string
	// Ahead is how many values more the scenario drew from it than the
	// clean run.
	Ahead int64
	// RankBy, when not empty, is the column to name in SequenceColumns
	// instead of Column: the one Column's foreign key points at, whose
	// ranks it then follows.
	RankBy string `json:",omitempty"`
}

// String says it in one line.
func (g SequenceGap) String() string {
	values := "values"
	if g.Ahead == 1 {
		values = "value"
	}
	by := g.RankBy
	if by == "" {
		by = g.Column
	}
	return fmt.Sprintf("%s differs only in numbers from sequence %s, which a rolled-back attempt advanced %d %s past the clean run; SequenceColumns: %q compares it by rank, as serial columns are",
		g.Column, g.Sequence, g.Ahead, values, by)
}

// sequenceAhead is a sequence the scenario drew more values from than the
// clean run.
type sequenceAhead struct {
	name           string
	onceLast, last int64 // last values drawn, on each side
	increment      int64
	ahead          int64 // values more on the scenario's side
}

// sequencesAhead lists the sequences twice advanced further than once.
func sequencesAhead(once, twice *Snapshot) []sequenceAhead {
	if once == nil || twice == nil {
		return nil
	}
	var out []sequenceAhead
	for _, s := range twice.Sequences {
		if !s.Called || s.Increment == 0 {
			continue
		}
		i := slices.IndexFunc(once.Sequences, func(o Sequence) bool { return o.Name == s.Name })
		if i < 0 || once.Sequences[i].Increment != s.Increment || !once.Sequences[i].Called {
			// A clean run that drew nothing from it took no value from
			// it that the scenario's could be compared with.
			continue
		}
		o := once.Sequences[i]
		if d := (s.Last - o.Last) / s.Increment; d > 0 && (s.Last-o.Last)%s.Increment == 0 {
			out = append(out, sequenceAhead{name: s.Name, onceLast: o.Last, last: s.Last, increment: s.Increment, ahead: d})
		}
	}
	return out
}

// explains reports whether the number n1 of the clean run and n2 of the
// scenario can be the same draw from s, shifted by values burnt before it:
// n2 lies 1 to s.ahead steps past n1, and each was drawn on its side.
func (s sequenceAhead) explains(n1, n2 int64) bool {
	d := n2 - n1
	if d == 0 || d%s.increment != 0 {
		return false
	}
	steps := d / s.increment
	drawn := func(n, last int64) bool { return (last-n)/s.increment >= 0 && (last-n)%s.increment == 0 }
	return steps > 0 && steps <= s.ahead && drawn(n1, s.onceLast) && drawn(n2, s.last)
}

// sequenceGaps explains the columns of a table's paired rows that differ
// only in numbers one advanced sequence accounts for. cols are the
// compared columns; a column explained differs in at least one pair and
// is explained, by the same sequence, in every pair where it differs.
func sequenceGaps(table string, cols []string, es []entry, ahead []sequenceAhead) []SequenceGap {
	if len(ahead) == 0 {
		return nil
	}
	var gaps []SequenceGap
	for i, c := range cols {
		candidates, differs := ahead, false
		for _, e := range es {
			if len(candidates) == 0 {
				break
			}
			if e.once == nil || e.twice == nil || !e.once.present[i] || !e.twice.present[i] {
				continue
			}
			a, b := e.once.vals[i], e.twice.vals[i]
			if valueKey(a) == valueKey(b) {
				continue
			}
			differs = true
			pairs, ok := differingNumbers(a, b)
			if !ok {
				candidates = nil
				break
			}
			candidates = slices.DeleteFunc(slices.Clone(candidates), func(s sequenceAhead) bool {
				return slices.ContainsFunc(pairs, func(p [2]int64) bool { return !s.explains(p[0], p[1]) })
			})
		}
		if !differs || len(candidates) == 0 {
			continue
		}
		// The tightest fit: the sequence that moved least past the clean
		// run, then by name.
		best := slices.MinFunc(candidates, func(x, y sequenceAhead) int {
			return cmp.Or(cmp.Compare(x.ahead, y.ahead), strings.Compare(x.name, y.name))
		})
		gaps = append(gaps, SequenceGap{Column: table + "." + c, Sequence: best.name, Ahead: best.ahead})
	}
	return gaps
}

// differingNumbers compares two values that may hold a number drawn from
// a sequence: two integers, or two strings alike but for runs of digits
// ("X-1", "X-2"). It returns the numbers that differ, once's then
// twice's; ok is false when the values differ otherwise.
func differingNumbers(a, b any) (pairs [][2]int64, ok bool) {
	switch a := a.(type) {
	case int64:
		b, isInt := b.(int64)
		if !isInt {
			return nil, false
		}
		return [][2]int64{{a, b}}, true
	case string:
		b, isString := b.(string)
		if !isString {
			return nil, false
		}
		ta, tb := digitRuns(a), digitRuns(b)
		if len(ta) != len(tb) {
			return nil, false
		}
		for i := range ta {
			x, y := ta[i], tb[i]
			if x == y {
				continue
			}
			if !isDigits(x) || !isDigits(y) {
				return nil, false
			}
			nx, errx := strconv.ParseInt(x, 10, 64)
			ny, erry := strconv.ParseInt(y, 10, 64)
			if errx != nil || erry != nil {
				return nil, false
			}
			pairs = append(pairs, [2]int64{nx, ny})
		}
		return pairs, len(pairs) > 0
	}
	return nil, false
}

// digitRuns splits s into alternating runs of ASCII digits and of
// anything else.
func digitRuns(s string) []string {
	var out []string
	start := 0
	for i := 1; i <= len(s); i++ {
		if i == len(s) || isDigit(s[i]) != isDigit(s[start]) {
			out = append(out, s[start:i])
			start = i
		}
	}
	return out
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isDigits(s string) bool {
	return s != "" && strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }) < 0
}

// rankBy is the column whose ranks renumber table.column once it is a
// sequence column: the end of its chain of foreign keys, or itself.
func (s *Snapshot) rankBy(table, column string) string {
	ref := table + "." + column
	for range maxReferenceDepth {
		c := s.column(table, column)
		if c == nil || c.References == "" {
			break
		}
		t, col, ok := splitColumnRef(c.References)
		if !ok || s.column(t, col) == nil {
			break
		}
		table, column, ref = t, col, c.References
	}
	return ref
}
