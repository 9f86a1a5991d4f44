package report

import (
	"fmt"
	"strings"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/text"
)

// Exit codes of twice report.
const (
	// ExitOK: every job is idempotent or an expected finding.
	ExitOK = 0
	// ExitFindings: a job has an unexpected finding or is flaky, or a
	// test failed for another reason.
	ExitFindings = 1
	// ExitBroken: usage or infrastructure: no Go toolchain, a package
	// that does not compile, a test binary that crashed, the harness
	// could not run (no PostgreSQL), no harness check ran at all.
	ExitBroken = 2
)

// Problem kinds.
const (
	ProblemBuildFailed    = "build-failed"
	ProblemCrashed        = "crashed"
	ProblemHarnessError   = "harness-error"
	ProblemUserError      = "user-error" // a check stopped by the user's code or configuration
	ProblemTestFailed     = "test-failed"
	ProblemNoHarnessTests = "no-harness-tests"
	ProblemNoTestFiles    = "no-test-files"
	ProblemGoTest         = "go-test"
	// ProblemNoPackage: a pattern twice was given matches no package.
	ProblemNoPackage = "no-package"
	// ProblemCleanRunsDisagree: a job's two clean reference runs did
	// different things (a handler with state of its own), so its verdict
	// says little; a warning, not fatal.
	ProblemCleanRunsDisagree = "clean-runs-disagree"
)

// Finish counts the jobs by outcome into r.Summary and sets r.ExitCode.
// Problems must already be in r.Summary.Problems.
func (r *Report) Finish() {
	r.Schema = SchemaVersion
	s := &r.Summary
	s.Jobs, s.Idempotent, s.ExpectedFinding, s.Flaky, s.Finding = len(r.Jobs), 0, 0, 0, 0
	// A check the user's code stopped could not run either.
	s.Errors = countKind(s.Problems, ProblemHarnessError) + countKind(s.Problems, ProblemUserError)
	for _, j := range r.Jobs {
		switch j.Outcome {
		case OutcomeIdempotent:
			s.Idempotent++
		case OutcomeExpected:
			s.ExpectedFinding++
		case OutcomeFlaky:
			s.Flaky++
		case OutcomeFinding:
			s.Finding++
		}
	}
	r.ExitCode = ExitOK
	if s.Finding > 0 || s.Flaky > 0 {
		r.ExitCode = ExitFindings
	}
	for _, p := range s.Problems {
		switch {
		case p.Fatal:
			r.ExitCode = ExitBroken
		case p.Kind == ProblemTestFailed && r.ExitCode == ExitOK:
			r.ExitCode = ExitFindings
		}
	}
}

// Title is the report's plain headline, for the pages a reader opens
// (index.html, the Markdown summary): "No findings: 10 idempotent, 12
// known not idempotent (expected)", "2 findings". A job known not to be
// idempotent is never folded into "all idempotent": each kind of verdict
// is counted apart. Headline is the same as a log line.
func (r *Report) Title() string {
	s := r.Summary
	switch r.ExitCode {
	case ExitOK:
		if s.Jobs == 0 {
			return "No job was checked"
		}
		if s.ExpectedFinding == 0 {
			if s.Jobs == 1 {
				return "1 job idempotent"
			}
			return fmt.Sprintf("All %d jobs idempotent", s.Jobs)
		}
		return fmt.Sprintf("No findings: %d idempotent, %d known not idempotent (expected)", s.Idempotent, s.ExpectedFinding)
	case ExitFindings:
		var parts []string
		if s.Finding > 0 {
			parts = append(parts, fmt.Sprintf("%d %s not idempotent", s.Finding, text.Plural(s.Finding, "job")))
		}
		if s.Flaky > 0 {
			parts = append(parts, fmt.Sprintf("%d %s flaky", s.Flaky, text.Plural(s.Flaky, "job")))
		}
		if n := countKind(s.Problems, ProblemTestFailed); n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s failed, not with a finding of twice", n, text.Plural(n, "test")))
		}
		return capitalize(strings.Join(parts, ", "))
	}
	var fatal []string
	for _, p := range s.Problems {
		if p.Fatal {
			fatal = append(fatal, strings.ReplaceAll(p.Kind, "-", " "))
		}
	}
	if len(fatal) == 0 {
		return "Not every job could be checked"
	}
	return "Not every job could be checked: " + strings.Join(dedupe(fatal), ", ")
}

// Tally is one count of the headline: a kind of verdict, how many jobs
// got it, and its status class for the page.
type Tally struct {
	N     int
	What  string
	Class string
}

// Tallies are the headline's counts, each kind of verdict apart and
// always in this order, zeros included: idempotent, known not idempotent
// (expected), findings, flaky, errors (checks that could not run).
func (r *Report) Tallies() []Tally {
	s := r.Summary
	return []Tally{
		{s.Idempotent, "idempotent", string(OutcomeIdempotent)},
		{s.ExpectedFinding, "known not idempotent (expected)", string(OutcomeExpected)},
		{s.Finding, text.Plural(s.Finding, "finding"), string(OutcomeFinding)},
		{s.Flaky, "flaky", string(OutcomeFlaky)},
		{s.Errors, text.Plural(s.Errors, "error"), "error"},
	}
}

// Counts is the jobs by kind of verdict in one line: "22 jobs: 10
// idempotent, 12 known not idempotent (expected), 0 findings". Flaky
// jobs and errors are named when there are any.
func (r *Report) Counts() string {
	var counts []string
	for i, t := range r.Tallies() {
		if i < 3 || t.N > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", t.N, t.What))
		}
	}
	out := fmt.Sprintf("%d %s: %s", r.Summary.Jobs, text.Plural(r.Summary.Jobs, "job"), strings.Join(counts, ", "))
	if r.RerunOf != "" {
		out += " (only the schedules that failed in " + r.RerunOf + ")"
	}
	return out
}

func countKind(ps []Problem, kind string) int {
	n := 0
	for _, p := range ps {
		if p.Kind == kind {
			n++
		}
	}
	return n
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// Headline is the report in one line: what twice says when it exits.
func (r *Report) Headline() string {
	s := r.Summary
	jobs := r.Counts()
	switch r.ExitCode {
	case ExitOK:
		return blame.Line("ok: %s", jobs)
	case ExitFindings:
		if s.Finding == 0 && s.Flaky == 0 {
			return blame.Line("a test failed, not with a finding of twice: %s%s", jobs, failingTests(s.Problems))
		}
		return blame.Line("not idempotent: %s%s", jobs, failingTests(s.Problems))
	}
	var fatal []string
	for _, p := range s.Problems {
		if p.Fatal {
			fatal = append(fatal, p.Kind)
		}
	}
	return blame.Line("could not check every job (%s): %s", strings.Join(dedupe(fatal), ", "), jobs)
}

func failingTests(ps []Problem) string {
	n := 0
	for _, p := range ps {
		if p.Kind == ProblemTestFailed {
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d failing %s", n, text.Plural(n, "test"))
}

func dedupe(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// outcomeWord is how an outcome reads in a sentence.
func outcomeWord(s Outcome) string {
	switch s {
	case OutcomeExpected:
		return "known not idempotent (expected)"
	case OutcomeFinding:
		return "not idempotent (a finding)"
	}
	return string(s)
}

// outcomeMark is an outcome as one symbol, for the matrix.
func outcomeMark(s Outcome) string {
	switch s {
	case OutcomeIdempotent:
		return "✓"
	case OutcomeExpected:
		return "◆"
	case OutcomeFlaky:
		return "~"
	case OutcomeFinding:
		return "✗"
	}
	return ""
}

// Cell returns job j's cell for fault, or false when the job did not run
// the fault.
func (j Job) Cell(fault string) (Cell, bool) {
	for _, c := range j.Cells {
		if c.Fault == fault {
			return c, true
		}
	}
	return Cell{}, false
}

// Shown returns the findings whose differences are shown, not named as
// the same as an earlier one's.
func (j Job) Shown() []Finding {
	return keep(j.Findings, func(f Finding) bool { return f.SameAs == "" })
}

// PkgName shortens an import path for tables: the part after the
// directory every package of the report shares.
func (r *Report) PkgName(path string) string {
	var paths []string
	for _, p := range r.Packages {
		paths = append(paths, p.ImportPath)
	}
	for _, j := range r.Jobs {
		paths = append(paths, j.Package)
	}
	if len(paths) == 0 {
		return path
	}
	prefix := paths[0]
	for _, p := range paths[1:] {
		for !strings.HasPrefix(p, prefix) {
			prefix = prefix[:len(prefix)-1]
		}
	}
	cut := strings.LastIndex(prefix, "/")
	if cut < 0 || !strings.HasPrefix(path, prefix[:cut+1]) || len(path) == cut+1 {
		return path
	}
	return path[cut+1:]
}

// noCheck reports whether p only says a package has no check: tests
// with no harness.Check, or no tests. That is not a problem: twice report
// ./... runs every package, and only some have jobs.
func noCheck(p Problem) bool {
	return p.Kind == ProblemNoHarnessTests || p.Kind == ProblemNoTestFiles
}

// ShownProblems are the problems a reader must act on: everything but
// the packages without a check (WithoutCheck).
func (r *Report) ShownProblems() []Problem {
	return keep(r.Summary.Problems, func(p Problem) bool { return !noCheck(p) })
}

// NoCheck is a package that ran no harness check, and why.
type NoCheck struct {
	Package string
	Why     string
}

// WithoutCheck lists the packages that ran no harness check: listed as
// such, apart from the problems.
func (r *Report) WithoutCheck() []NoCheck {
	tests := map[string]int{}
	for _, p := range r.Packages {
		tests[p.ImportPath] = p.Tests
	}
	var out []NoCheck
	for _, p := range r.Summary.Problems {
		switch p.Kind {
		case ProblemNoTestFiles:
			out = append(out, NoCheck{p.Package, "no test files"})
		case ProblemNoHarnessTests:
			n := tests[p.Package]
			out = append(out, NoCheck{p.Package, fmt.Sprintf("%d %s ran, none calls harness.Check", n, text.Plural(n, "test"))})
		}
	}
	return out
}

// Warnings are every job's warnings, in job order.
func (r *Report) Warnings() []string {
	var out []string
	for _, j := range r.Jobs {
		out = append(out, j.Warnings...)
	}
	return out
}

// WithVolatile are the jobs, passing or not, that left columns or effect
// fields out of every comparison as volatile: a pass says nothing of
// them, so every report names them.
func (r *Report) WithVolatile() []Job {
	return keep(r.Jobs, func(j Job) bool { return len(j.Volatile) > 0 })
}

// keep returns the xs that ok holds for, in order; nil when there are
// none.
func keep[T any](xs []T, ok func(T) bool) []T {
	var out []T
	for _, x := range xs {
		if ok(x) {
			out = append(out, x)
		}
	}
	return out
}

// TimeHint is what a job's volatile times suggest, or "": "events.sent_at
// holds a time: if the handler takes it from time.Now(), use d.Now, so
// that a time a redelivery moves is compared".
func (j Job) TimeHint() string {
	if len(j.VolatileTimes) == 0 {
		return ""
	}
	verb := "holds a time"
	if len(j.VolatileTimes) > 1 {
		verb = "hold times"
	}
	return fmt.Sprintf("%s %s: if the handler takes it from time.Now(), use d.Now, so that a time a redelivery moves is compared", strings.Join(j.VolatileTimes, ", "), verb)
}
