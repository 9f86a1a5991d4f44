package harness

import (
	"slices"
	"strings"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/result"
)

// disagreement is how the two clean reference runs differed beyond what
// volatile columns and effect fields explain, or nil when they agree.
// Volatile columns explain every difference between rows the two runs
// both have (assert.VolatileColumns makes every differing column of a
// table volatile whole when its row counts differ), so what is left is
// a count: a table's rows, an effect kind's effects, the steps; and a
// statement's text or an effect's kind at some step. An effect step's
// text holds its payload, whose fields may be volatile: only its kind
// is compared.
func disagreement(refs [2]*assert.Snapshot, fx [2][]assert.Effect, steps [2][]faults.Step) *result.Disagreement {
	var d result.Disagreement
	rows := func(s *assert.Snapshot) map[string]int {
		m := map[string]int{}
		if s != nil {
			for _, t := range s.Tables {
				m[t.Name] = len(t.Rows)
			}
		}
		return m
	}
	d.Rows = differing(rows(refs[0]), rows(refs[1]))
	effects := func(es []assert.Effect) map[string]int {
		m := map[string]int{}
		for _, e := range es {
			if e.Happened() {
				m[e.Kind]++
			}
		}
		return m
	}
	d.Effects = differing(effects(fx[0]), effects(fx[1]))
	s1, s2 := steps[0], steps[1]
	at := 0
	for i := range min(len(s1), len(s2)) {
		if s1[i].Effect != s2[i].Effect || (!s1[i].IsEffect() && s1[i].SQL != s2[i].SQL) {
			at = i + 1
			break
		}
	}
	if at == 0 && len(s1) != len(s2) {
		at = min(len(s1), len(s2)) + 1
	}
	if at > 0 {
		d.Steps, d.StepAt = [2]int{len(s1), len(s2)}, at
	}
	if d.Rows == nil && d.Effects == nil && d.StepAt == 0 {
		return nil
	}
	return &d
}

// differing are the names whose counts differ between a and b, sorted;
// a name missing on one side counts 0 there.
func differing(a, b map[string]int) []result.RunCounts {
	var out []result.RunCounts
	for name, n := range a {
		if b[name] != n {
			out = append(out, result.RunCounts{Name: name, Runs: [2]int{n, b[name]}})
		}
	}
	for name, n := range b {
		if _, ok := a[name]; !ok && n != 0 {
			out = append(out, result.RunCounts{Name: name, Runs: [2]int{0, n}})
		}
	}
	slices.SortFunc(out, func(x, y result.RunCounts) int { return strings.Compare(x.Name, y.Name) })
	return out
}
