package assert

import (
	"errors"
	"fmt"
	"strings"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/text"
)

// TestingT is the part of testing.TB that StateEqual uses: *testing.T,
// *testing.B and testify's mocks satisfy it. When t also has a Helper
// method, StateEqual calls it.
type TestingT interface {
	Errorf(format string, args ...any)
}

// StateError reports a scenario whose database state differs from one
// clean run. Its message starts "[twice] not idempotent: ".
type StateError struct {
	Label    string      // the scenario, Options.Label
	Diffs    []TableDiff // one per differing table, sorted by table
	Volatile []string    // the volatile columns that were left out
}

func (e *StateError) Error() string {
	var b strings.Builder
	b.WriteString(blame.Line("not idempotent: the database"))
	if e.Label != "" {
		b.WriteString(" after " + e.Label)
	}
	fmt.Fprintf(&b, " differs from one clean run in %d %s", len(e.Diffs), text.Plural(len(e.Diffs), "table"))
	for _, d := range e.Diffs {
		b.WriteString("\n")
		b.WriteString(d.String())
	}
	if len(e.Volatile) > 0 {
		b.WriteString("\nvolatile columns, left out: " + strings.Join(e.Volatile, ", "))
	}
	return b.String()
}

// CheckState compares the state after a scenario (twice) with the state
// after one clean run (once). It returns nil when they are equal, a
// *StateError when they differ, and an error of twice's own when a
// snapshot is missing or Options.CmpOptions made go-cmp panic.
func CheckState(once, twice *Snapshot, opts Options) error {
	switch {
	case once == nil:
		return fmt.Errorf("CheckState: the once snapshot is nil; take it with TakeSnapshot after the clean run")
	case twice == nil:
		return fmt.Errorf("CheckState: the twice snapshot is nil; take it with TakeSnapshot after the scenario")
	}
	diffs, err := DiffState(once, twice, opts)
	if err != nil {
		return err
	}
	if len(diffs) == 0 {
		return nil
	}
	return &StateError{Label: opts.Label, Diffs: diffs, Volatile: opts.Volatile}
}

// StateEqual reports, as one t.Errorf, every table whose state differs
// between once and twice, and returns whether they were equal.
func StateEqual(t TestingT, once, twice *Snapshot, opts Options) bool {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	if err := CheckState(once, twice, opts); err != nil {
		t.Errorf("%s", failure(err))
		return false
	}
	return true
}

// failure is err as StateEqual and EffectsEqual report it: a finding's
// own message, which starts with the tag, or an error that stopped the
// comparison, tagged and labelled by blame.Message.
func failure(err error) string {
	var state *StateError
	var effects *EffectsDiffer
	if errors.As(err, &state) || errors.As(err, &effects) {
		return err.Error()
	}
	return blame.Message(err)
}
