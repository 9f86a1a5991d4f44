package main

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/runtwice/twice/cmd/twice/internal/about"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/record"
	"github.com/runtwice/twice/internal/render"
	"github.com/runtwice/twice/internal/report"
	"github.com/runtwice/twice/internal/text"
)

// builder turns records and go test events into a report.
type builder struct {
	runs *testRuns
	// dirs maps a package directory to its import path (go list).
	dirs map[string]string
	// cwd is where twice runs; replay commands name packages relative to
	// it.
	cwd string
	// unreadable are the records that could not be read: each is its
	// check's problem, and the other checks' results stand.
	unreadable []record.Unreadable
}

// build fills r.Jobs, r.Faults, r.Packages and r.Summary.Problems.
func (b *builder) build(r *report.Report, recs []record.Record) {
	type key struct{ dir, test, job string }
	var keys []key
	byKey := map[key][]record.Record{}
	for _, rec := range recs {
		if rec.Coverage != nil {
			r.AddRegistry(b.importPath(rec.Dir), rec.Test, *rec.Coverage)
			continue
		}
		k := key{rec.Dir, rec.Test, rec.Result.Job}
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], rec)
	}
	checks := map[string]int{}     // import path -> records
	explained := map[string]bool{} // "pkg\x00test" failures a job explains
	var internal []report.Problem
	for _, u := range b.unreadable {
		p := b.unreadableProblem(u)
		checks[p.Package]++
		internal = append(internal, p)
		explained[p.Package+"\x00"+p.Test] = true
	}
	for _, k := range keys {
		if p, ok := b.internalError(byKey[k]); ok {
			checks[p.Package]++
			internal = append(internal, p)
			explained[p.Package+"\x00"+p.Test] = true
			continue
		}
		j := b.job(byKey[k])
		checks[j.Package]++
		internal = append(internal, disagreements(j, byKey[k][0].Result)...)
		if j.Outcome == report.OutcomeFinding || j.Outcome == report.OutcomeFlaky {
			explained[j.Package+"\x00"+j.Test] = true
		}
		r.Jobs = append(r.Jobs, j)
	}
	sort.SliceStable(r.Jobs, func(i, k int) bool {
		if r.Jobs[i].Package != r.Jobs[k].Package {
			return r.Jobs[i].Package < r.Jobs[k].Package
		}
		return r.Jobs[i].Test < r.Jobs[k].Test
	})
	r.Faults = report.FaultsOf(r.Jobs)
	r.Summary.Problems = append(r.Summary.Problems, internal...)
	for _, p := range b.runs.sortedPackages() {
		r.Packages = append(r.Packages, b.pkg(p, checks[p.importPath]))
		r.Summary.Problems = append(r.Summary.Problems, b.problems(p, checks[p.importPath], explained)...)
	}
}

// internalError is the problem a check reports when it could not run:
// its record says so, whatever go test printed.
// unreadableProblem is a record that could not be read, as its check's
// problem: a harness error (exit 2), for that check alone.
func (b *builder) unreadableProblem(u record.Unreadable) report.Problem {
	pkg, test := b.importPath(u.Dir), u.Test
	where := "a check"
	switch {
	case test != "" && pkg != "":
		where = test + " in " + pkg
	case test != "":
		where = test
	}
	p := report.Problem{
		Kind: report.ProblemHarnessError, Package: pkg, Test: test, Fatal: true,
		Message: blame.Message(fmt.Errorf("the result %s of %s could not be read, so its verdict is unknown (every other check's stands): %s; rerun that test alone, and report this with the file's error",
			u.File, where, text.FirstLine(u.Err.Error()))),
	}
	if t := b.test(pkg, test); t != nil {
		p.Output = t.output.lastLines(30)
	}
	return p
}

// disagreements are the job's clean runs that disagreed, each a problem
// of that job: not a verdict, and not fatal, but what says its verdict
// means little (the report shows the job and its warning too).
func disagreements(j report.Job, res *result.Result) []report.Problem {
	var out []report.Problem
	for _, w := range res.Warnings {
		if w.Kind == result.CleanRunsDisagree {
			out = append(out, report.Problem{
				Kind: report.ProblemCleanRunsDisagree, Package: j.Package, Test: j.Test,
				Message: blame.Line("%s", render.Warning(res.Job, w)),
			})
		}
	}
	return out
}

func (b *builder) internalError(recs []record.Record) (report.Problem, bool) {
	for _, rec := range recs {
		kind := report.ProblemHarnessError
		switch rec.Result.Outcome {
		case result.OutcomeInternalError:
		case result.OutcomeUserError:
			kind = report.ProblemUserError // the job's or the test's code, not twice
		default:
			continue
		}
		pkg := b.importPath(rec.Dir)
		p := report.Problem{
			Kind: kind, Package: pkg, Test: rec.Test, Fatal: true,
			Message: blame.Line("%s in %s could not run its check of job %q: %s", rec.Test, pkg, rec.Result.Job, text.FirstLine(rec.Error)),
		}
		if t := b.test(pkg, rec.Test); t != nil {
			p.Output = t.output.lastLines(30)
		}
		return p, true
	}
	return report.Problem{}, false
}

func (b *builder) pkg(p *packageRun, checks int) report.Package {
	out := report.Package{ImportPath: p.importPath, Result: p.result, Duration: report.Ms(p.elapsed), Checks: checks}
	if p.failedBuild {
		out.Result = "build-failed"
	}
	for _, t := range p.tests {
		if t.ran && !strings.Contains(t.name, "/") {
			out.Tests++
		}
	}
	return out
}

// problems are the lines about package p that are not a job's verdict.
func (b *builder) problems(p *packageRun, checks int, explained map[string]bool) []report.Problem {
	var out []report.Problem
	if p.failedBuild {
		return append(out, report.Problem{
			Kind: report.ProblemBuildFailed, Package: p.importPath, Fatal: true,
			Message: blame.Line("%s does not compile; fix the errors below and run twice again", p.importPath),
			Output:  strings.TrimRight(p.buildOutput.String(), "\n"),
		})
	}
	if crash, ok := b.crash(p); ok {
		out = append(out, crash)
	}
	for _, name := range p.order {
		t := p.tests[name]
		if t.result != "fail" || explained[p.importPath+"\x00"+name] || hasFailedSubtest(p, name) || isCrashed(t) {
			continue
		}
		msg := failureLine(t.output.String())
		if msg == "" {
			msg = "see its output"
		}
		out = append(out, report.Problem{
			Kind: report.ProblemTestFailed, Package: p.importPath, Test: name,
			Message: blame.Line("%s in %s failed, and not with a finding of twice: %s", name, p.importPath, msg),
			Output:  t.output.lastLines(30),
		})
	}
	if len(out) > 0 || checks > 0 {
		return out
	}
	switch {
	case p.result == "skip" && len(p.tests) == 0:
		out = append(out, report.Problem{
			Kind: report.ProblemNoTestFiles, Package: p.importPath,
			Message: blame.Line("%s has no test files: nothing to check", p.importPath),
		})
	case p.result != "":
		out = append(out, report.Problem{
			Kind: report.ProblemNoHarnessTests, Package: p.importPath,
			Message: blame.Line("%s: no test called harness.Check (%d %s ran): nothing to report for it", p.importPath, len(p.order), text.Plural(len(p.order), "test")),
		})
	}
	return out
}

// crash reports a test binary that died mid-run: a test that started and
// never ended, a panic, or a timeout.
func (b *builder) crash(p *packageRun) (report.Problem, bool) {
	if p.result != "fail" && p.result != "" {
		return report.Problem{}, false
	}
	var running *testRun
	for _, name := range p.order {
		if t := p.tests[name]; t.ran && t.result == "" {
			running = t
		}
	}
	var panicked *testRun
	for _, name := range p.order {
		if t := p.tests[name]; isCrashed(t) {
			panicked = t
			break
		}
	}
	pkgPanic := panicLine(p.output.String())
	switch {
	case panicked != nil:
		line := panicLine(panicked.output.String())
		what := "panicked"
		if strings.Contains(line, "test timed out") {
			what = "timed out (raise go test's -timeout, e.g. twice report -timeout 30m)"
		}
		return report.Problem{
			Kind: report.ProblemCrashed, Package: p.importPath, Test: panicked.name, Fatal: true,
			Message: blame.Line("the test binary of %s crashed: %s %s: %s; the tests after it did not run", p.importPath, panicked.name, what, line),
			Output:  panicked.output.lastLines(40),
		}, true
	case running != nil:
		out := running.output.lastLines(30)
		if o := p.output.lastLines(10); o != "" {
			out += "\n" + o
		}
		return report.Problem{
			Kind: report.ProblemCrashed, Package: p.importPath, Test: running.name, Fatal: true,
			Message: blame.Line("the test binary of %s exited during %s (os.Exit, a signal, or a crash in code it called); the tests after it did not run", p.importPath, running.name),
			Output:  strings.TrimSpace(out),
		}, true
	case pkgPanic != "":
		return report.Problem{
			Kind: report.ProblemCrashed, Package: p.importPath, Fatal: true,
			Message: blame.Line("the test binary of %s crashed: %s", p.importPath, pkgPanic),
			Output:  p.output.lastLines(40),
		}, true
	case p.result == "" && p.started:
		return report.Problem{
			Kind: report.ProblemCrashed, Package: p.importPath, Fatal: true,
			Message: blame.Line("go test never finished %s", p.importPath),
			Output:  p.output.lastLines(30),
		}, true
	}
	return report.Problem{}, false
}

func isCrashed(t *testRun) bool { return panicLine(t.output.String()) != "" }

// panicLine returns the first "panic: " line of output, or "".
func panicLine(output string) string {
	for line := range strings.SplitSeq(output, "\n") {
		if strings.HasPrefix(line, "panic: ") {
			return line
		}
	}
	return ""
}

func hasFailedSubtest(p *packageRun, name string) bool {
	for sub, t := range p.tests {
		if strings.HasPrefix(sub, name+"/") && t.result == "fail" {
			return true
		}
	}
	return false
}

// failureLine returns what a failed test that no finding explains said:
// its first message of its own (t.Error, t.Fatal, t.Log lines:
// "file.go:12: ..."), not the harness's tagged lines, which say how its
// checks went; or, when it said nothing else, the harness's last line.
func failureLine(output string) string {
	last := ""
	for line := range strings.SplitSeq(output, "\n") {
		l := strings.TrimSpace(line)
		loc := goFileLine.FindString(l)
		if loc == "" {
			continue
		}
		msg := l[len(loc):]
		if !strings.HasPrefix(msg, blame.Tag) {
			return msg
		}
		last = msg
	}
	return last
}

// job merges the records of one check (several with go test -count).
// The check's outcome comes from its records; go test says only whether
// the test passed.
func (b *builder) job(recs []record.Record) report.Job {
	base := recs[0]
	res := base.Result
	pkg := b.importPath(base.Dir)
	j := report.Job{
		Name: res.Job, Package: pkg, Test: base.Test, Runs: len(recs),
		Steps: steps(res.Steps), Rerun: base.Rerun, Duration: report.Ms(res.Duration),
		Scenarios: len(res.Scenarios), Failed: len(res.Failed()),
	}
	j.Volatile = append(append(j.Volatile, res.Volatile...), res.VolatileEffects...)
	j.VolatileTimes = render.TimeColumns(res.Reference, res.Volatile)
	for _, w := range res.Warnings {
		j.Warnings = append(j.Warnings, blame.Line("%s", render.Warning(res.Job, w)))
	}
	t := b.test(pkg, base.Test)
	j.TestPassed = t != nil && t.result == "pass"

	// Verdicts of each schedule over every run: mixed ones are flaky.
	type sched struct{ fault, schedule string }
	verdicts := map[sched]map[result.Verdict]bool{}
	first := map[sched]result.Scenario{}
	var order []sched
	outcomes := map[result.Outcome]bool{}
	for _, rec := range recs {
		outcomes[rec.Result.Outcome] = true
		for i, s := range rec.Result.Scenarios {
			if rec.Result.Shard == nil {
				// Unsharded, the place is the position, also in records
				// written before scenarios carried their Index.
				s.Index = i
			}
			k := sched{string(s.Fault), s.Schedule.String()}
			if verdicts[k] == nil {
				verdicts[k] = map[result.Verdict]bool{}
				order = append(order, k)
			}
			verdicts[k][s.Verdict] = true
			if _, ok := first[k]; !ok || (s.Verdict != result.Idempotent && first[k].Verdict == result.Idempotent) {
				first[k] = s
			}
		}
	}
	// A scenario whose confirming rerun differed is flaky in one run.
	flaky := func(k sched) bool { return len(verdicts[k]) > 1 || verdicts[k][result.Flaky] }

	findingOutcome := report.OutcomeFinding
	switch {
	case outcomes[result.OutcomeFlaky]:
		findingOutcome = report.OutcomeFlaky
	case outcomes[result.OutcomeExpectedFinding]:
		findingOutcome, j.Expected = report.OutcomeExpected, res.ExpectFinding
	case outcomes[result.OutcomeFinding] && j.TestPassed:
		// Check reported the finding to a stand-in for the test (a
		// golden-message test), and the test itself passed.
		findingOutcome, j.Expected = report.OutcomeExpected, "the test passed: it asserts this finding itself"
	}

	took := map[string]time.Duration{} // by fault, in the first run
	for _, s := range res.Scenarios {
		took[string(s.Fault)] += s.Duration
	}
	cells := map[string]*report.Cell{}
	var faultOrder []string
	if res.Shard != nil {
		// Every fault of the check has a cell, so shards' reports merge
		// in the check's order of faults whatever each shard ran.
		j.Schedules = res.Shard.Schedules
		for _, f := range res.Shard.Faults {
			cells[string(f)] = &report.Cell{Fault: string(f), Outcome: report.OutcomeIdempotent, Duration: report.Ms(took[string(f)])}
			faultOrder = append(faultOrder, string(f))
		}
	}
	var failed []result.Scenario
	for _, k := range order {
		c, ok := cells[k.fault]
		if !ok {
			c = &report.Cell{Fault: k.fault, Outcome: report.OutcomeIdempotent, Duration: report.Ms(took[k.fault])}
			cells[k.fault] = c
			faultOrder = append(faultOrder, k.fault)
		}
		c.Scenarios++
		s := first[k]
		if s.Verdict == result.Idempotent && !flaky(k) {
			continue
		}
		c.Failed++
		outcome := findingOutcome
		if flaky(k) && outcome != report.OutcomeExpected {
			outcome = report.OutcomeFlaky
		}
		c.Outcome = report.Worse(c.Outcome, outcome)
		j.Findings = append(j.Findings, b.finding(base, s, outcome))
		failed = append(failed, s)
	}
	// A difference already shown is named, not repeated: the go test
	// output's groups (render.Difference), so differences alike but for
	// the keys the handler drew (a random idempotency key per delivery)
	// are one difference here too.
	shown := map[string]int{}
	for i, s := range failed {
		k := render.Difference(s)
		if first, ok := shown[k]; ok {
			j.Findings[i].SameAs = j.Findings[first].Schedule
			continue
		}
		shown[k] = i
	}
	// The worst first (a double charge before a moved timestamp); the
	// first of a difference keeps its place before those that name it.
	for _, s := range failed {
		j.Worst = max(j.Worst, s.Severity)
	}
	slices.SortStableFunc(j.Findings, func(x, y report.Finding) int {
		return cmp.Compare(sev(j.Findings, y), sev(j.Findings, x))
	})
	j.Outcome = report.OutcomeIdempotent
	for _, name := range faultOrder {
		j.Cells = append(j.Cells, *cells[name])
		j.Outcome = report.Worse(j.Outcome, cells[name].Outcome)
	}
	return j
}

// steps are the report's steps: the statement's SQL or the effect call.
func steps(in []faults.Step) []report.Step {
	var out []report.Step
	for _, s := range in {
		out = append(out, report.Step{Text: s.SQL, Effect: s.Effect})
	}
	return out
}

var goFileLine = regexp.MustCompile(`^[\w.-]+\.go:\d+: `)

func (b *builder) test(pkg, name string) *testRun {
	p := b.runs.packages[pkg]
	if p == nil {
		return nil
	}
	return p.tests[name]
}

// importPath returns the import path of the package in dir, or dir
// relative to the working directory when go list did not name it.
func (b *builder) importPath(dir string) string {
	if p, ok := b.dirs[dir]; ok {
		return p
	}
	return b.relDir(dir)
}

// relDir names dir the way go test takes it: "./examples/loyalty".
func (b *builder) relDir(dir string) string {
	rel, err := filepath.Rel(b.cwd, dir)
	if err != nil {
		return dir
	}
	if rel == "." {
		return "."
	}
	if strings.HasPrefix(rel, "..") {
		return filepath.ToSlash(rel)
	}
	return "./" + filepath.ToSlash(rel)
}

func (b *builder) finding(rec record.Record, s result.Scenario, outcome report.Outcome) report.Finding {
	diff := sha256.Sum256([]byte(render.Difference(s)))
	f := report.Finding{
		Fault: string(s.Fault), Schedule: s.Schedule.String(), Scenario: s.Index + 1, Outcome: outcome,
		Difference: hex.EncodeToString(diff[:8]), Problems: render.Problems(s),
		Order: s.Order, Database: s.Database, Dump: s.Dump, Rerun: render.Rerun(s),
		Replay: replayCommand(s.Schedule.String(), b.relDir(rec.Dir), rec.Test),
	}
	if s.DumpError != nil {
		f.DumpError = s.DumpError.Message
	}
	f.Severity = s.Severity
	for _, c := range s.Culprits {
		rc := report.Culprit{Step: c.Step, Op: c.Op, SQL: c.SQL, Effect: c.Effect, Table: c.Table, Row: c.Row, Changes: c.Changes,
			Pattern: c.Pattern, Fix: render.Pattern(c.Pattern), Text: render.Culprit(c)}
		if c.Delivery.Job > 0 {
			rc.Delivery = c.Delivery.Label()
		}
		f.Culprits = append(f.Culprits, rc)
	}
	for _, o := range s.Deliveries {
		sd := o.Delivery
		var taken []report.Step
		for _, st := range o.Steps {
			taken = append(taken, report.Step{Text: st.SQL, Effect: st.Effect, Fate: st.Fate})
		}
		f.Deliveries = append(f.Deliveries, report.Delivery{
			Label: sd.Label(), Steps: taken, Died: o.Died, AckLost: o.AckLost, Outcome: o.Fault, Err: o.Err, QueueRetry: o.QueueRetry,
			Kind: string(o.Kind), NotDelivered: o.NotDelivered, Settled: o.Settled, Unheld: o.Unheld,
			Job: sd.Job, Attempt: sd.Attempt, Worker: sd.Worker,
			Advance: report.Ms(sd.Advance), Late: sd.Late, Waited: report.Ms(o.Waited), With: sd.With, After: sd.After, At: sd.At,
			Fault: sd.Fault.String(),
		})
	}
	for _, e := range s.Effects {
		f.Effects = append(f.Effects, report.Effect{Kind: e.Kind, Text: e.String(), Delivery: e.Delivery, Result: e.Result, Err: e.Err, Replayed: e.Replayed, ReplyLost: e.ReplyLost})
	}
	for _, d := range s.StateDiff {
		td := report.TableDiff{Table: d.Table, Diff: strings.TrimRight(d.Diff, "\n")}
		for _, g := range d.Gaps {
			td.Notes = append(td.Notes, g.String())
		}
		f.StateDiff = append(f.StateDiff, td)
	}
	if s.EffectDiff != nil {
		f.EffectDiff = s.EffectDiff.String()
	}
	return f
}

// replayCommand is the twice replay line for one schedule of one test,
// naming twice as the user ran it (go run, or twice on PATH).
func replayCommand(schedule, pkg, test string) string {
	return fmt.Sprintf("%s replay %s %s -run %s", about.Command(), shellQuote(schedule), pkg, shellQuote(render.TestPattern(test)))
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// sev is a finding's severity for ordering: a finding that names an
// earlier one (SameAs) sorts with it.
func sev(all []report.Finding, f report.Finding) result.Severity {
	if f.SameAs != "" {
		for _, o := range all {
			if o.Schedule == f.SameAs {
				return o.Severity
			}
		}
	}
	return f.Severity
}
