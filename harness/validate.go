package harness

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/render"
)

// Checks that turn a check that would test nothing into an error: each of
// these used to pass in silence.

// errNoFaults: an empty, non-nil Config.Faults would run no scenario.
var errNoFaults = blame.User(errors.New("[twice] Config.Faults is empty, so no scenario would run and every job would pass; leave it nil for faults.Default(), or name the faults to run"))

// checkTookSteps refuses a check in which the handler took no step at
// all: not on its clean run, not in any scenario. No statement reached
// PostgreSQL through the delivery and no effect went through its fakes, so
// no fault had anywhere to strike and no difference could show. An error,
// not a finding: the job may well be idempotent, but twice cannot tell. (A
// handler that acts only on a redelivery took steps, and one whose retry
// fails or panics has a finding: neither passes in silence.)
func checkTookSteps(job string, clean []faults.Step, scenarios []Scenario) error {
	if len(clean) > 0 {
		return nil
	}
	for _, s := range scenarios {
		if s.Verdict != Idempotent {
			return nil // a finding (a retry that panics, say) is not silent
		}
		for _, d := range s.Deliveries {
			if len(d.Steps) > 0 {
				return nil
			}
		}
	}
	return fmt.Errorf("[twice] job %q took no step, on its clean run or in any scenario: no statement reached PostgreSQL through the Delivery's DB, SQL() or DSN and no effect went through d.Mail(), d.Payments() or d.Effect, so there was nothing to break or compare; give the handler the Delivery's connections and fakes", job)
}

// checkSchedule refuses a schedule whose crash or lost reply falls past the
// last step of the job's clean run, or whose effect fault acts on a step
// that is no effect call there: that fault would never happen and the
// scenario would pass as if it had.
func checkSchedule(job string, clean []faults.Step, s faults.Schedule) error {
	steps := len(clean)
	if err := checkOverlap(job, steps, s); err != nil {
		return err
	}
	for _, d := range s.Deliveries {
		switch d.Fault {
		case faults.KindCrash, faults.KindAmbiguous, faults.KindEffectLostReply, faults.KindEffectFailed:
		default:
			continue
		}
		if d.At > steps {
			n := fmt.Sprintf("%d steps", steps)
			if steps == 1 {
				n = "1 step"
			}
			hint := fmt.Sprintf("use a step from 1 to %d (or !crash alone for after the last step)", steps)
			if d.Fault.OnEffect() {
				hint = effectStepsHint(clean)
			}
			return fmt.Errorf("[twice] schedule %q: %s!%s:%d acts on step %d, but job %q takes %s on a clean run, so the fault would never happen; %s", s.String(), d.Label(), d.Fault, d.At, d.At, job, n, hint)
		}
		if d.Fault.OnEffect() && d.At > 0 && !clean[d.At-1].IsEffect() {
			return fmt.Errorf("[twice] schedule %q: %s!%s:%d acts on an effect call, but step %d of job %q's clean run is a statement (%s), so the fault would never happen; %s", s.String(), d.Label(), d.Fault, d.At, d.At, job, render.OneLine(clean[d.At-1].SQL), effectStepsHint(clean))
		}
	}
	return nil
}

// checkOverlap refuses a start or an order no run of the job can
// plausibly reach: a delivery started once another has done more steps
// than the job takes on a clean run, or an order with more places than
// the deliveries take steps, or an order for deliveries that never
// overlap. A delivery may take more steps than the clean run (a retry's
// own path), so up to overlapSlack times as many are accepted; @1:5 on a
// one-step job or 7 places for two one-step deliveries are not.
func checkOverlap(job string, steps int, s faults.Schedule) error {
	takes := fmt.Sprintf("%d %s", steps, render.Plural(steps, "step"))
	overlap := false
	for i, d := range s.Deliveries {
		if d.With == 0 {
			continue
		}
		overlap = true
		if most := overlapSlack * steps; d.After > most {
			return fmt.Errorf("[twice] schedule %q: delivery %d (%s) starts once delivery %d has done %d steps, but job %q takes %s on a clean run, so the deliveries would never overlap; use @%d:0 to @%d:%d (a delivery may take up to %d times the clean run's steps)", s.String(), i+1, d, d.With, d.After, job, takes, d.With, d.With, most, overlapSlack)
		}
	}
	if len(s.Order) == 0 {
		return nil
	}
	if !overlap {
		return fmt.Errorf("[twice] schedule %q: an order interleaves deliveries that overlap, but every delivery here starts after the previous one ended; start one beside another with @delivery:steps (j1a2w2@1:0), or drop the order", s.String())
	}
	if most := overlapSlack * steps * len(s.Deliveries); len(s.Order) > most {
		return fmt.Errorf("[twice] schedule %q: the order has %d places, but its %d deliveries take %d %s in all on a clean run of job %q (%s each); give at most %d (a delivery may take up to %d times the clean run's steps)", s.String(), len(s.Order), len(s.Deliveries), steps*len(s.Deliveries), render.Plural(steps*len(s.Deliveries), "step"), job, takes, most, overlapSlack)
	}
	return nil
}

// overlapSlack is how many times the clean run's steps a delivery may
// take, for checkOverlap.
const overlapSlack = 2

// effectStepsHint names the steps an effect fault can act on.
func effectStepsHint(clean []faults.Step) string {
	var at []string
	for i, st := range clean {
		if st.IsEffect() {
			at = append(at, strconv.Itoa(i+1))
		}
	}
	if len(at) == 0 {
		return "the job makes no effect call on a clean run, so no effect fault applies"
	}
	return fmt.Sprintf("its effect calls are %s %s", render.Plural(len(at), "step"), strings.Join(at, ", "))
}

// checkIgnored refuses IgnoreTables, IgnoreColumns and SequenceColumns
// entries that name no table or column of the clean run's snapshot: a
// typo would leave the intended table compared, or hide nothing while the
// user believes it does. A column is "table.column" or "column" (only the
// first for SequenceColumns); a path into a json or jsonb column
// ("table.column.key") counts when its column is one.
func checkIgnored(cfg Config, ref *assert.Snapshot) error {
	tables := map[string]bool{}
	columns := map[string]string{} // "table.column" and "column" -> type
	for _, t := range ref.Tables {
		tables[t.Name] = true
		for _, c := range t.Columns {
			columns[t.Name+"."+c.Name] = c.Type
			columns[c.Name] = c.Type
		}
	}
	var bad []string
	for _, t := range cfg.IgnoreTables {
		if !tables[t] {
			bad = append(bad, fmt.Sprintf("IgnoreTables: no table %q", t))
		}
	}
	for _, c := range cfg.IgnoreColumns {
		if !knownColumn(c, columns) {
			bad = append(bad, fmt.Sprintf("IgnoreColumns: no column %q", c))
		}
	}
	for _, c := range cfg.SequenceColumns {
		if _, ok := columns[c]; !ok || !strings.Contains(c, ".") {
			bad = append(bad, fmt.Sprintf("SequenceColumns: no column %q (name it \"table.column\")", c))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	have := "it has no table"
	if len(tables) > 0 {
		have = "its tables are " + strings.Join(slices.Sorted(maps.Keys(tables)), ", ")
	}
	return fmt.Errorf("[twice] Config names what the database does not have after a clean run (%s); %s", strings.Join(bad, "; "), have)
}

// knownColumn reports whether c names a column, or a path inside a json or
// jsonb one.
func knownColumn(c string, columns map[string]string) bool {
	if _, ok := columns[c]; ok {
		return true
	}
	for i := len(c) - 1; i > 0; i-- {
		if c[i] != '.' {
			continue
		}
		if typ, ok := columns[c[:i]]; ok && (typ == "json" || typ == "jsonb") {
			return true
		}
	}
	return false
}
