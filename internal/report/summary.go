package report

import (
	"fmt"
	"strings"
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
)

// Finish counts the jobs by status into r.Summary and sets r.ExitCode.
// Problems must already be in r.Summary.Problems.
func (r *Report) Finish() {
	r.Schema = SchemaVersion
	s := &r.Summary
	s.Jobs, s.Idempotent, s.ExpectedFinding, s.Flaky, s.Finding = len(r.Jobs), 0, 0, 0, 0
	for _, j := range r.Jobs {
		switch j.Status {
		case StatusIdempotent:
			s.Idempotent++
		case StatusExpected:
			s.ExpectedFinding++
		case StatusFlaky:
			s.Flaky++
		case StatusFinding:
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
// (index.html, the Markdown summary): "All 22 jobs idempotent or
// expected", "2 jobs not idempotent". Headline is the same as a log line.
func (r *Report) Title() string {
	s := r.Summary
	jobs := func(n int) string { return fmt.Sprintf("%d %s", n, plural(n, "job")) }
	switch r.ExitCode {
	case ExitOK:
		if s.Jobs == 0 {
			return "No job was checked"
		}
		all := "All " + jobs(s.Jobs)
		if s.Jobs == 1 {
			all = "1 job"
		}
		if s.ExpectedFinding > 0 {
			return all + " idempotent or expected"
		}
		return all + " idempotent"
	case ExitFindings:
		var parts []string
		if s.Finding > 0 {
			parts = append(parts, jobs(s.Finding)+" not idempotent")
		}
		if s.Flaky > 0 {
			parts = append(parts, jobs(s.Flaky)+" flaky")
		}
		if n := countKind(s.Problems, ProblemTestFailed); n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s failed for another reason", n, plural(n, "test")))
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

// Counts is the jobs by status in one line: "22 jobs: 20 idempotent, 2
// expected findings".
func (r *Report) Counts() string {
	s := r.Summary
	counts := []string{}
	add := func(n int, what string) {
		if n > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(s.Idempotent, "idempotent")
	add(s.ExpectedFinding, "expected "+plural(s.ExpectedFinding, "finding"))
	add(s.Flaky, "flaky")
	add(s.Finding, "not idempotent")
	jobs := fmt.Sprintf("%d %s", s.Jobs, plural(s.Jobs, "job"))
	if len(counts) > 0 {
		jobs += ": " + strings.Join(counts, ", ")
	}
	return jobs
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
	counts := []string{}
	add := func(n int, what string) {
		if n > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(s.Idempotent, "idempotent")
	add(s.ExpectedFinding, "expected "+plural(s.ExpectedFinding, "finding"))
	add(s.Flaky, "flaky")
	add(s.Finding, "not idempotent")
	jobs := fmt.Sprintf("%d %s", s.Jobs, plural(s.Jobs, "job"))
	if len(counts) > 0 {
		jobs += ": " + strings.Join(counts, ", ")
	}
	switch r.ExitCode {
	case ExitOK:
		return "[twice] ok: " + jobs
	case ExitFindings:
		return "[twice] not idempotent: " + jobs + failingTests(s.Problems)
	}
	var fatal []string
	for _, p := range s.Problems {
		if p.Fatal {
			fatal = append(fatal, p.Kind)
		}
	}
	return fmt.Sprintf("[twice] could not check every job (%s): %s", strings.Join(dedupe(fatal), ", "), jobs)
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
	return fmt.Sprintf("; %d failing %s", n, plural(n, "test"))
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

// statusWord is how a status reads in a sentence.
func statusWord(s Status) string {
	switch s {
	case StatusExpected:
		return "expected finding"
	case StatusFinding:
		return "not idempotent"
	}
	return string(s)
}

// statusMark is a status as one symbol, for the matrix.
func statusMark(s Status) string {
	switch s {
	case StatusIdempotent:
		return "✓"
	case StatusExpected:
		return "◆"
	case StatusFlaky:
		return "~"
	case StatusFinding:
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
	var out []Finding
	for _, f := range j.Findings {
		if f.SameAs == "" {
			out = append(out, f)
		}
	}
	return out
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
