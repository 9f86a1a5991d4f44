package harness

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
)

// Checks that turn a check that would test nothing into an error: each of
// these used to pass in silence.

// errNoFaults: an empty, non-nil Config.Faults would run no scenario.
var errNoFaults = errors.New("[twice] Config.Faults is empty, so no scenario would run and every job would pass; leave it nil for faults.Default(), or name the faults to run")

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
// last step of the job's clean run: that fault would never happen and the
// scenario would pass as if it had.
func checkSchedule(job string, steps int, s faults.Schedule) error {
	for _, d := range s.Deliveries {
		var what string
		switch d.Fault {
		case faults.KindCrash:
			what = "crash"
		case faults.KindAmbiguous:
			what = "ambiguous"
		default:
			continue
		}
		if d.At > steps {
			n := fmt.Sprintf("%d steps", steps)
			if steps == 1 {
				n = "1 step"
			}
			return fmt.Errorf("[twice] schedule %q: %s!%s:%d acts on step %d, but job %q takes %s on a clean run, so the fault would never happen; use a step from 1 to %d (or !crash alone for after the last step)", s.String(), d.Label(), what, d.At, d.At, job, n, steps)
		}
	}
	return nil
}

// checkIgnored refuses IgnoreTables and IgnoreColumns entries that name no
// table or column of the clean run's snapshot: a typo would leave the
// intended table compared, or hide nothing while the user believes it
// does. A column is "table.column" or "column"; a path into a json or
// jsonb column ("table.column.key") counts when its column is one.
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
