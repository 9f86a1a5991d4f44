package harness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/evidence"
	"github.com/runtwice/twice/internal/freshdb"
	"github.com/runtwice/twice/internal/pgserver"
	"github.com/runtwice/twice/internal/render"
	"github.com/runtwice/twice/internal/text"
)

// Result is everything Run learned about a job: a result.Result, whose
// fields (the check's Outcome, the reference, every Scenario and its
// deliveries) are documented in package result, with the databases
// Run kept as evidence of failed scenarios. Those are live databases on
// the test's server, not values a result file can hold, which is why
// Result wraps result.Result rather than being one: DropDatabases drops
// them. When the check ran as one shard of several (ShardEnv),
// Result.Shard says which, and Scenarios holds only that shard's,
// possibly none.
type Result struct {
	result.Result

	kept []kept
	// stragglers notes handler goroutines still running when the check
	// ended (Executor.StillRunning); Check and Explore log it.
	stragglers string
}

// kept is a failed scenario's database, held until the test's end decides
// whether it is evidence.
type kept struct {
	scenario int // index into Scenarios
	db       *freshdb.Database
}

// String is the result as Check reports it: "ok" with the number of
// scenarios when the job is idempotent, else every failed scenario,
// grouped by difference, with its deliveries and diffs.
func (r *Result) String() string {
	if r.Idempotent() {
		return blame.Line("ok: job %q: %d %s%s, none differs from one clean run", r.Job, len(r.Scenarios), text.Plural(len(r.Scenarios), "scenario"), render.InShard(&r.Result))
	}
	failed := r.Failed()
	var b strings.Builder
	b.WriteString(blame.Line("%s\n", render.Headline(&r.Result)))
	render.Findings(&b, &r.Result, failed)
	return b.String()
}

// DropDatabases drops the databases Run kept as evidence of failed
// scenarios, and clears the scenarios' Database, which names them. Check
// does it for you when the test passes.
func (r *Result) DropDatabases(ctx context.Context) error {
	var errs []error
	for _, k := range r.kept {
		errs = append(errs, k.db.Drop(ctx))
		r.Scenarios[k.scenario].Database = ""
	}
	r.kept = nil
	return errors.Join(errs...)
}

// skippedData says which tables a dump holds without their rows.
func skippedData(tables []string) string {
	if len(tables) == 0 {
		return ""
	}
	return fmt.Sprintf(" (without the rows of %s, the fixture's: the rows the scenario wrote are in twice.history)", strings.Join(tables, ", "))
}

// keepDatabases makes the failed scenarios' databases outlive the run and
// says, one line each, how to connect to them. On a server that dies with
// the test binary it also dumps them to files and says how to restore
// them, since the psql line works only while the binary runs.
func (r *Result) keepDatabases(ctx context.Context) []string {
	var lines []string
	for _, k := range r.kept {
		s := &r.Scenarios[k.scenario]
		if err := k.db.Keep(ctx); err != nil {
			lines = append(lines, fmt.Sprintf("internal: keeping the database of %s (%s): %v", s.Fault, s.Schedule, err))
			continue
		}
		s.Database = k.db.DisplayConnString()
		srv, err := pgserver.Shared(ctx)
		if err != nil || srv.Outlives() {
			lines = append(lines, fmt.Sprintf("kept the database of %s (%s) as evidence: psql %q (twice kept lists and drops kept databases)", s.Fault, s.Schedule, s.Database))
			continue
		}
		live := fmt.Sprintf("kept the database of %s (%s) as evidence: psql %q while the test binary runs", s.Fault, s.Schedule, s.Database)
		// A big table's rows are the fixture's but for those the scenario
		// wrote, which its write history (twice.history) holds: the dump
		// leaves them out rather than copy the fixture per failure.
		big := k.db.Template().Undone()
		if err := srv.Dump(ctx, k.db.Name, evidence.DumpFile(k.db.Name), big...); err != nil {
			s.DumpError = result.NewError(err)
			lines = append(lines, fmt.Sprintf("%s; it could not be dumped, so it is lost when the test binary exits (its server stops with it): %v", live, err))
			continue
		}
		s.Dump = evidence.DumpFile(k.db.Name)
		lines = append(lines, live+fmt.Sprintf("; the server stops with it, so it is dumped to %s: restore it with %s", s.Dump, evidence.RestoreCommand(k.db.Name))+skippedData(big))
	}
	r.kept = nil
	return lines
}

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
	if at > 0 && sameSteps(s1, s2) {
		// The same statements and effects in another order (a handler's
		// goroutines racing): nothing is left out of a comparison.
		at = 0
	}
	if at > 0 {
		d.Steps, d.StepAt = [2]int{len(s1), len(s2)}, at
	}
	if d.Rows == nil && d.Effects == nil && d.StepAt == 0 {
		return nil
	}
	return &d
}

// sameSteps reports whether a and b are the same statements and effect
// calls, each as often, in any order.
func sameSteps(a, b []faults.Step) bool {
	if len(a) != len(b) {
		return false
	}
	key := func(s faults.Step) string {
		if s.IsEffect() {
			return "effect " + s.Effect
		}
		return "sql " + s.SQL
	}
	left := map[string]int{}
	for _, s := range a {
		left[key(s)]++
	}
	for _, s := range b {
		if left[key(s)]--; left[key(s)] < 0 {
			return false
		}
	}
	return true
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
