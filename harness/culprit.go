package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strings"
	"time"

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
// and the pattern each shows (a second insert by deliveries that ran at
// once, overlapped, is a check-then-act race). None without a clean
// history, or when no table differs.
func (c *cleanRecord) culprits(hist []execute.Written, deliveries []execute.DeliveryOutcome, diffs []assert.TableDiff, overlapped bool) []result.Culprit {
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
	for _, w := range hist {
		if differs[w.Table] {
			seen[kindOf(w)]++
		}
	}
	extra := extraWrites(hist, clean, seen, differs)
	var out []result.Culprit
	for i, w := range hist {
		k := kindOf(w)
		if !extra[i] {
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
		if cu.Pattern == result.InsertWithoutKey && overlapped {
			cu.Pattern = result.CheckThenAct
		}
		out = append(out, cu)
		if len(out) == maxCulprits {
			return out
		}
	}
	return append(out, missingWrites(c.writes, clean, seen, differs, deliveries)...)
}

// extraWrites picks, for each statement of a differing table that the
// scenario ran more often than the clean run, which of its writes (by
// index in hist) are the ones past the clean run's: first those of rows
// the clean run's writes of that statement did not touch, or touched
// fewer times (a second job's row, a second insert, a second increment of
// one row), in the order written; then the latest of the others.
func extraWrites(hist []execute.Written, clean map[writeKind][]execute.Written, seen map[writeKind]int, differs map[string]bool) map[int]bool {
	rows := map[writeKind]map[string]int{} // the clean run's writes per statement and row
	for k, ws := range clean {
		rows[k] = map[string]int{}
		for _, w := range ws {
			rows[k][w.Key]++
		}
	}
	matched, unmatched := map[writeKind][]int{}, map[writeKind][]int{}
	for i, w := range hist {
		k := kindOf(w)
		if !differs[w.Table] || seen[k] <= len(clean[k]) {
			continue
		}
		if rows[k][w.Key] > 0 {
			rows[k][w.Key]--
			matched[k] = append(matched[k], i)
		} else {
			unmatched[k] = append(unmatched[k], i)
		}
	}
	out := map[int]bool{}
	for k, n := range seen {
		need := n - len(clean[k])
		picks := unmatched[k]
		for j := len(matched[k]) - 1; j >= 0; j-- {
			picks = append(picks, matched[k][j])
		}
		for _, i := range picks[:max(0, min(need, len(picks)))] {
			out[i] = true
		}
	}
	return out
}

// missingWrites are the clean run's writes of a differing table that the
// scenario made fewer of, as culprits: the work that never happened. The
// delivery named is the first the scenario's fault hit (a crash, a lost
// answer), where the work was lost; lostPattern says why.
func missingWrites(order []execute.Written, clean map[writeKind][]execute.Written, seen map[writeKind]int, differs map[string]bool, deliveries []execute.DeliveryOutcome) []result.Culprit {
	hit := firstHit(deliveries)
	var out []result.Culprit
	done := map[writeKind]bool{}
	for _, w := range order {
		k := kindOf(w)
		if !differs[k.table] || seen[k] >= len(clean[k]) || done[k] {
			continue
		}
		done[k] = true
		w = clean[k][seen[k]]
		c := result.Culprit{SQL: w.Query, Table: w.Table, Row: w.Key, Op: "missing " + opName(w.Op), Pattern: lostPattern(hit, deliveries, result.WorkLost)}
		if hit != nil {
			c.Delivery = hit.Delivery
		}
		out = append(out, c)
		if len(out) == maxCulprits {
			break
		}
	}
	return out
}

// lateCopies names the pattern of what a late producer copy did beyond
// the clean run: the queue took the copy as a new job because its dedup
// had ended by the time the copy came (faults.Scheduled.Late: after the
// original completed, or past the dedup window), whatever the write or
// call itself shows.
func lateCopies(cs []result.Culprit) {
	for i := range cs {
		if d := cs[i].Delivery; d.Late && !strings.HasPrefix(cs[i].Op, "missing") {
			cs[i].Pattern = result.DedupWindowPassed
		}
	}
}

// firstHit is the first delivery the scenario's fault hit, or nil.
func firstHit(deliveries []execute.DeliveryOutcome) *execute.DeliveryOutcome {
	for i, d := range deliveries {
		if d.Died || d.Fault != "" {
			return &deliveries[i]
		}
	}
	return nil
}

// lostPattern is why work of the clean run never happened, hit being the
// delivery the fault hit: the queue took the job as done before that
// delivery died (a later delivery of the job found it done), or
// otherwise.
func lostPattern(hit *execute.DeliveryOutcome, deliveries []execute.DeliveryOutcome, otherwise result.Pattern) result.Pattern {
	if hit == nil || !hit.Died {
		return otherwise
	}
	for _, d := range deliveries {
		if d.Delivery.Job == hit.Delivery.Job && d.QueueDone && d.Delivery.Attempt > hit.Delivery.Attempt {
			return result.AckBeforeWork
		}
	}
	return otherwise
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
// the same statement moved it is an increment applied again; one that
// stored in a row another value than the clean run's write of it stored
// is a changed result; an insert the clean run makes fewer times is a
// second row nothing unique stopped. Anything else is not recognised.
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
	// The clean run's write of the same row stored another value in a
	// column this one changed.
	for _, cw := range clean {
		if cw.Key != w.Key || cw.Key == "" {
			continue
		}
		for _, c := range changes(w.Old, w.New) {
			if jsonText(cw.New[c.Column]) != c.After {
				return result.ResultChanged
			}
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

// effectCulprits names the effects of diff: each made beyond the clean
// run's, with the delivery that made it, and each of the clean run's the
// scenario lacks, with the pattern each shows, from the effects' keys,
// jobs and times (effects, the scenario's log).
func effectCulprits(diff *assert.EffectDiff, effects []assert.Effect, deliveries []execute.DeliveryOutcome) []result.Culprit {
	if diff == nil {
		return nil
	}
	var out []result.Culprit
	for _, l := range diff.Lines {
		if l.Op != "+" && l.Op != "-" {
			continue
		}
		e := l.Effect
		c := result.Culprit{Effect: l.Text, Op: "extra", Pattern: extraPattern(e, effects)}
		if l.Op == "-" {
			c.Op, c.Pattern = "missing", lostPattern(firstHit(deliveries), deliveries, result.EffectLost)
		}
		for _, d := range deliveries {
			if d.Delivery.Label() == e.Delivery {
				c.Delivery = d.Delivery
				if l.Op == "+" {
					c.Step = effectStep(d, e, effects)
				}
				break
			}
		}
		out = append(out, c)
		if len(out) == maxCulprits {
			break
		}
	}
	return out
}

// effectStep is the step of delivery d that made e, one of effects: its
// n-th effect call is its n-th step that calls out (as the diagram draws
// them); 0 when the count does not reach it.
func effectStep(d execute.DeliveryOutcome, e assert.Effect, effects []assert.Effect) int {
	n := 0
	for _, o := range effects {
		if o.Delivery != e.Delivery {
			continue
		}
		n++
		if o.At.Equal(e.At) && o.Kind == e.Kind && o.Key == e.Key && o.ReplyLost == e.ReplyLost && bytes.Equal(o.Payload, e.Payload) {
			break
		}
	}
	for k, st := range d.Steps {
		if st.Effect == "" {
			continue
		}
		if n--; n == 0 {
			return k + 1
		}
	}
	return 0
}

// extraPattern is why e, an effect made beyond the clean run's, was made
// again: its key was the first call's and the provider had forgotten it
// (the key window passed), its key differs from another call's for the
// same job (drawn per attempt) or for a copy of the job a producer's
// retry enqueued (per enqueue), or it has no key at all: sent again by
// the same delivery after the first call's answer failed to come (a
// retry without a key), or by another delivery.
func extraPattern(e assert.Effect, effects []assert.Effect) result.Pattern {
	if e.Key == "" {
		if resent(e, effects) {
			return result.RetryWithoutKey
		}
		return result.EffectWithoutRecord
	}
	copyKey := false // a copy of the job (a producer's retry) made it with another key
	for _, o := range effects {
		if o.Kind != e.Kind || !o.Happened() || o.Delivery == e.Delivery {
			continue
		}
		switch {
		case o.Key == e.Key && o.At.Before(e.At):
			return result.KeyWindowPassed
		case o.Key != "" && o.Key != e.Key && o.JobID == e.JobID:
			return result.KeyPerAttempt
		case o.Key != "" && o.Key != e.Key:
			copyKey = true
		}
	}
	if copyKey {
		return result.KeyPerEnqueue
	}
	return ""
}

// resent reports whether e, a call with no key, is one of two or more
// its delivery made alike (the same kind and payload), one of which went
// unanswered for the handler (its answer lost, or come after the
// client's timeout): the delivery sent it again, and which of the two
// the diff calls extra is the diff's choice.
func resent(e assert.Effect, effects []assert.Effect) bool {
	alike, unanswered := 0, false
	for _, o := range effects {
		if o.Delivery == e.Delivery && o.Kind == e.Kind && o.Key == "" && bytes.Equal(o.Payload, e.Payload) {
			alike++
			unanswered = unanswered || o.ReplyLost
		}
	}
	return alike > 1 && unanswered
}

// moneyColumns are the names a column holding an amount goes by.
var moneyColumns = []string{"amount", "cents", "balance", "points", "price", "total", "credit", "paid", "fee", "cost"}

// severity ranks a finding: an effect made twice against an
// exactly-once or at-most-once policy, or lost, first; then a changed
// amount (a culprit changed a numeric column whose name says amount);
// then any other difference; a difference only in timestamp columns
// last.
func severity(sc result.Scenario, policies map[string]assert.Policy) result.Severity {
	if len(sc.Problems) == 0 {
		return result.SeverityNone
	}
	if d := sc.EffectDiff; d != nil {
		for _, l := range d.Lines {
			if p := policies[l.Effect.Kind]; l.Op == "-" || (l.Op == "+" && (p == assert.ExactlyOnce || p == assert.AtMostOnce)) {
				return result.SeverityEffect
			}
		}
	}
	onlyTime := len(sc.Culprits) > 0 && len(sc.StateDiff) > 0
	for _, c := range sc.Culprits {
		for _, ch := range c.Changes {
			if delta(ch.Before, ch.After) != nil && slices.ContainsFunc(moneyColumns, func(m string) bool { return strings.Contains(strings.ToLower(ch.Column), m) }) {
				return result.SeverityMoney
			}
			if !isTimestamp(ch.Before) || !isTimestamp(ch.After) {
				onlyTime = false
			}
		}
		if len(c.Changes) == 0 {
			onlyTime = false
		}
	}
	if onlyTime && len(sc.Problems) == len(sc.StateDiff) {
		return result.SeverityTime
	}
	return result.SeverityState
}

// isTimestamp reports whether a JSON value is a timestamp as to_jsonb
// writes one.
func isTimestamp(v string) bool {
	var s string
	if json.Unmarshal([]byte(v), &s) != nil {
		return false
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999", "2006-01-02"} {
		if _, err := time.Parse(layout, s); err == nil {
			return true
		}
	}
	return false
}
