package harness

import (
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"sort"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/execute"
)

// maxCulprits bounds the culprits named per scenario: the first few
// writes past the clean run's say who did it; the diff shows the rest.
const maxCulprits = 5

// writeKind is what makes writes of one table comparable between a
// scenario and the clean run: the statement that wrote them and what it
// did. Keys are left out: a rolled-back attempt burns serial values, so
// the same insert gets another key in a scenario.
type writeKind struct {
	table, query string
	op           byte
}

func kindOf(w execute.Written) writeKind { return writeKind{w.Table, w.Query, w.Op} }

// cleanRecord is what the first clean run wrote, for naming culprits:
// its write history and the job ID its delivery was given.
type cleanRecord struct {
	writes []execute.Written
	jobID  string
}

// culprits names the writes that made the tables of diffs differ: in
// each such table, the writes of a statement in hist (a scenario's write
// history; execute.Output.History) past the number the clean run makes
// of it, in the order written, with the delivery and step that made each
// and the pattern each shows. None without a clean history, or when no
// table differs.
func (c *cleanRecord) culprits(hist []execute.Written, deliveries []execute.DeliveryOutcome, diffs []assert.TableDiff) []result.Culprit {
	if len(diffs) == 0 || c.writes == nil {
		return nil
	}
	differs := map[string]bool{}
	for _, d := range diffs {
		differs[d.Table] = true
	}
	clean := map[writeKind][]execute.Written{}
	for _, w := range c.writes {
		clean[kindOf(w)] = append(clean[kindOf(w)], w)
	}
	seen := map[writeKind]int{}
	var out []result.Culprit
	for _, w := range hist {
		if !differs[w.Table] {
			continue
		}
		k := kindOf(w)
		seen[k]++
		if seen[k] <= len(clean[k]) {
			continue
		}
		cu := result.Culprit{SQL: w.Query, Table: w.Table, Row: w.Key, Op: opName(w.Op), Changes: changes(w.Old, w.New), Pattern: pattern(w, clean[k])}
		if w.Delivery >= 0 && w.Delivery < len(deliveries) {
			d := deliveries[w.Delivery]
			cu.Delivery, cu.Step = d.Delivery, w.Step
			if c.keyedByJobID(w, d.JobID, clean[k]) {
				cu.Pattern = result.KeyPerEnqueue
			}
		}
		out = append(out, cu)
		if len(out) == maxCulprits {
			break
		}
	}
	return out
}

func opName(op byte) string {
	switch op {
	case 'I':
		return "insert"
	case 'U':
		return "update"
	case 'D':
		return "delete"
	}
	return string(op)
}

// changes are the columns whose values differ between a row's images.
func changes(old, new map[string]any) []result.Change {
	if old == nil || new == nil {
		return nil
	}
	var cols []string
	for c := range new {
		cols = append(cols, c)
	}
	sort.Strings(cols)
	var out []result.Change
	for _, c := range cols {
		b, a := jsonText(old[c]), jsonText(new[c])
		if b != a {
			out = append(out, result.Change{Column: c, Before: b, After: a})
		}
	}
	return out
}

// pattern is what a write past the clean run's shows, from the history
// alone: an update that moved a number by what the clean run's write of
// the same statement moved it is an increment applied again; an insert
// the clean run makes fewer times is a second row nothing unique
// stopped. Anything else is not recognised.
func pattern(w execute.Written, clean []execute.Written) result.Pattern {
	switch {
	case w.Op == 'I' && len(clean) > 0:
		return result.InsertWithoutKey
	case w.Op != 'U':
		return ""
	}
	for _, c := range changes(w.Old, w.New) {
		d := delta(c.Before, c.After)
		if d == nil || d.Sign() == 0 {
			continue
		}
		if slices.ContainsFunc(clean, func(cw execute.Written) bool {
			cd := delta(jsonText(cw.Old[c.Column]), jsonText(cw.New[c.Column]))
			return cd != nil && cd.Cmp(d) == 0
		}) {
			return result.IncrementWithoutRecord
		}
	}
	return ""
}

// delta is after - before when both are JSON numbers, or nil.
func delta(before, after string) *big.Rat {
	b, ok1 := new(big.Rat).SetString(numberText(before))
	a, ok2 := new(big.Rat).SetString(numberText(after))
	if !ok1 || !ok2 {
		return nil
	}
	return a.Sub(a, b)
}

// numberText is a JSON number's text, or "" for anything else.
func numberText(v string) string {
	var n json.Number
	if err := json.Unmarshal([]byte(v), &n); err != nil {
		return ""
	}
	return fmt.Sprint(n)
}

// keyedByJobID reports whether an insert's row holds, in a column, the
// job ID its delivery was given, where the clean run's insert of the same
// statement holds the clean run's job ID: a record keyed by the queue's
// ID, which a producer's copy of the job does not share.
func (c *cleanRecord) keyedByJobID(w execute.Written, jobID string, clean []execute.Written) bool {
	if w.Op != 'I' || jobID == "" || jobID == c.jobID || c.jobID == "" {
		return false
	}
	for col, v := range w.New {
		if s, ok := v.(string); !ok || s != jobID {
			continue
		}
		if slices.ContainsFunc(clean, func(cw execute.Written) bool { return cw.New[col] == c.jobID }) {
			return true
		}
	}
	return false
}

// jsonText is a value of a row image as JSON.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
