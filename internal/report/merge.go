package report

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
)

// Input is one shard's report for Merge, and where it was read from, so
// errors can name it.
type Input struct {
	From   string
	Report *Report
}

// Merge joins the reports of every shard of one run (twice report -shard
// i/n) into the report the whole run would have written: a job's
// scenarios from every shard become one job, its cells sum the shards'
// cells, its findings are in their unsharded order with SameAs worked
// out again across shards, and every status, count and the exit code
// are recomputed. Timings add up, and the run spans from the first
// shard's start to the last one's end.
//
// Merge refuses inputs that are not the shards of one run: a report
// without a shard, shards of different counts, a shard given twice or
// missing, reports of different twice versions, commits or go test
// commands, and
// a job whose shards disagree on its clean run or its schedules.
func Merge(in []Input) (*Report, error) {
	shards, err := orderShards(in)
	if err != nil {
		return nil, err
	}
	first := shards[0].Report
	out := &Report{Started: first.Started, Command: first.Command, Twice: first.Twice, Commit: first.Commit}
	var end time.Time
	var hosts []string
	for _, s := range shards {
		r := s.Report
		if r.Twice != first.Twice && r.Twice != "" && first.Twice != "" {
			return nil, blame.Userf("shard %s (%s) was written by twice %s, shard %s (%s) by twice %s: run every shard with the same twice", r.Shard, s.From, r.Twice, first.Shard, shards[0].From, first.Twice)
		}
		if r.Commit != first.Commit && r.Commit != "" && first.Commit != "" {
			return nil, blame.Userf("shard %s (%s) checked commit %s, shard %s (%s) commit %s: merge the shards of one run", r.Shard, s.From, r.Commit, first.Shard, shards[0].From, first.Commit)
		}
		if r.Command != first.Command {
			return nil, blame.Userf("shard %s (%s) ran %q, shard %s (%s) ran %q: the shards of one run split the same go test command", r.Shard, s.From, r.Command, first.Shard, shards[0].From, first.Command)
		}
		if r.Started.Before(out.Started) {
			out.Started = r.Started
		}
		if e := r.Started.Add(r.Duration.Duration()); e.After(end) {
			end = e
		}
		if r.Host != "" && !slices.Contains(hosts, r.Host) {
			hosts = append(hosts, r.Host)
		}
	}
	out.Duration = Ms(end.Sub(out.Started))
	out.Host = strings.Join(hosts, ", ")

	out.Jobs, err = mergeJobs(shards)
	if err != nil {
		return nil, err
	}
	out.Faults = FaultsOf(out.Jobs)
	out.Packages = mergePackages(shards)
	for _, s := range shards {
		for _, g := range s.Report.Registries {
			out.AddRegistry(g.Package, g.Test, result.Coverage{Registry: g.Registry, Kinds: g.Kinds, Unchecked: g.Unchecked, Unregistered: g.Unregistered})
		}
	}
	for _, s := range shards {
		for _, p := range s.Report.Summary.Problems {
			if !slices.ContainsFunc(out.Summary.Problems, func(q Problem) bool { return q == p }) {
				out.Summary.Problems = append(out.Summary.Problems, p)
			}
		}
	}
	out.Finish()
	return out, nil
}

// orderShards checks that in holds every shard of one run once, and
// returns them in shard order.
func orderShards(in []Input) ([]Input, error) {
	if len(in) == 0 {
		return nil, blame.Userf("nothing to merge: give the report.json of every shard")
	}
	for _, s := range in {
		if s.Report.Shard == nil {
			return nil, blame.Userf("%s is not a shard's report: write each shard's with twice report -shard i/n", s.From)
		}
	}
	n := in[0].Report.Shard.Count
	byIndex := make([]*Input, n+1)
	for i := range in {
		s := &in[i]
		sh := s.Report.Shard
		if sh.Count != n {
			return nil, blame.Userf("%s is shard %s, %s is shard %s: merge the shards of one run, split one way", in[0].From, in[0].Report.Shard, s.From, sh)
		}
		if sh.Index < 1 || sh.Index > n {
			return nil, blame.Userf("%s names shard %s; shards count from 1 to %d", s.From, sh, n)
		}
		if prev := byIndex[sh.Index]; prev != nil {
			return nil, blame.Userf("shard %s is given twice: %s and %s", sh, prev.From, s.From)
		}
		byIndex[sh.Index] = s
	}
	var missing []string
	out := make([]Input, 0, n)
	for i, s := range byIndex[1:] {
		if s == nil {
			missing = append(missing, Shard{Index: i + 1, Count: n}.String())
			continue
		}
		out = append(out, *s)
	}
	if len(missing) > 0 {
		return nil, blame.Userf("shard %s missing: merge the reports of all %d shards", strings.Join(missing, ", "), n)
	}
	return out, nil
}

type jobKey struct{ pkg, test, name string }

// mergeJobs joins each job's shards, in the order of the first shard
// that has it, sorted by package then test as a whole run's are.
func mergeJobs(shards []Input) ([]Job, error) {
	var keys []jobKey
	parts := map[jobKey][]Job{}
	from := map[jobKey][]Input{}
	for _, s := range shards {
		for _, j := range s.Report.Jobs {
			k := jobKey{j.Package, j.Test, j.Name}
			if _, ok := parts[k]; !ok {
				keys = append(keys, k)
			}
			parts[k] = append(parts[k], j)
			from[k] = append(from[k], s)
		}
	}
	var jobs []Job
	for _, k := range keys {
		if len(parts[k]) < len(shards) {
			if s, ok := lacking(shards, from[k]); ok {
				return nil, blame.Userf("job %q (%s %s) is in some shards' reports but not in shard %s's (%s), which reports no failure that explains it: merge the reports of one run", k.name, k.pkg, k.test, s.Report.Shard, s.From)
			}
		}
		j, err := mergeJob(parts[k], from[k])
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	sort.SliceStable(jobs, func(i, k int) bool {
		if jobs[i].Package != jobs[k].Package {
			return jobs[i].Package < jobs[k].Package
		}
		return jobs[i].Test < jobs[k].Test
	})
	return jobs, nil
}

// lacking returns a shard not in have whose report has no fatal problem:
// nothing there explains why it lacks a job the others have.
func lacking(shards, have []Input) (Input, bool) {
	for _, s := range shards {
		if slices.ContainsFunc(have, func(h Input) bool { return h.Report == s.Report }) {
			continue
		}
		if !slices.ContainsFunc(s.Report.Summary.Problems, func(p Problem) bool { return p.Fatal }) {
			return s, true
		}
	}
	return Input{}, false
}

// mergeJob joins one job's parts, one per shard that ran it.
func mergeJob(parts []Job, from []Input) (Job, error) {
	j := parts[0]
	j.Cells, j.Findings, j.Volatile = nil, nil, slices.Clone(j.Volatile)
	j.Scenarios, j.Failed, j.Duration, j.Schedules = 0, 0, 0, 0
	cells := map[string]*Cell{}
	var order []string
	explored := map[string]bool{} // an exploration's findings of earlier shards
	for i, p := range parts {
		if !sameSteps(p.Steps, parts[0].Steps) {
			return Job{}, blame.Userf("job %q (%s %s): its clean run took other steps in shard %s (%s) than in shard %s (%s): the shards ran different code", j.Name, j.Package, j.Test, from[i].Report.Shard, from[i].From, from[0].Report.Shard, from[0].From)
		}
		if p.Schedules != parts[0].Schedules {
			return Job{}, blame.Userf("job %q (%s %s) has %d schedules in shard %s (%s) but %d in shard %s (%s): the shards ran different code or faults", j.Name, j.Package, j.Test, p.Schedules, from[i].Report.Shard, from[i].From, parts[0].Schedules, from[0].Report.Shard, from[0].From)
		}
		j.TestPassed = j.TestPassed && p.TestPassed
		j.Worst = max(j.Worst, p.Worst)
		if j.Expected == "" {
			j.Expected = p.Expected
		}
		for _, v := range p.Volatile {
			if !slices.Contains(j.Volatile, v) {
				j.Volatile = append(j.Volatile, v)
			}
		}
		j.Scenarios += p.Scenarios
		j.Failed += p.Failed
		j.Duration += p.Duration
		for _, c := range p.Cells {
			m, ok := cells[c.Fault]
			if !ok {
				m = &Cell{Fault: c.Fault, Outcome: OutcomeIdempotent}
				cells[c.Fault] = m
				order = append(order, c.Fault)
			}
			m.Scenarios += c.Scenarios
			m.Failed += c.Failed
			m.Duration += c.Duration
			m.Outcome = Worse(m.Outcome, c.Outcome)
		}
		j.Findings = append(j.Findings, p.Findings...)
		dropRepeatedExplorations(&j, cells, len(j.Findings)-len(p.Findings), explored)
	}
	// More is allowed: a shard whose deliveries left what the reduction of
	// the interleavings assumed ran its share of the orders it had left
	// out, after the check's schedules.
	if want := parts[0].Schedules; want > 0 && len(parts) == from[0].Report.Shard.Count && j.Scenarios < want {
		return Job{}, blame.Userf("job %q (%s %s): its shards ran %d scenarios together, but the check has %d schedules", j.Name, j.Package, j.Test, j.Scenarios, want)
	}
	j.Outcome = OutcomeIdempotent
	for _, f := range order {
		// A whole run has no cell for a fault that gave no schedule.
		if c := cells[f]; c.Scenarios > 0 {
			j.Cells = append(j.Cells, *c)
			j.Outcome = Worse(j.Outcome, c.Outcome)
		}
	}
	// Shards' findings, each in its shard's order, into the whole run's.
	sort.SliceStable(j.Findings, func(a, b int) bool { return j.Findings[a].Scenario < j.Findings[b].Scenario })
	first := map[string]string{} // difference -> schedule that showed it first
	for i := range j.Findings {
		f := &j.Findings[i]
		if f.Difference == "" {
			continue // from a twice that did not write it: keep the shard's
		}
		f.SameAs = ""
		if s, ok := first[f.Difference]; ok {
			f.SameAs = s
			continue
		}
		first[f.Difference] = f.Schedule
	}
	return j, nil
}

// FaultsOf are the matrix's columns for jobs: every fault they ran, in
// the order it first appears along the jobs' cells, so the columns do not
// depend on which package's tests finished first.
func FaultsOf(jobs []Job) []string {
	var out []string
	for _, j := range jobs {
		for _, c := range j.Cells {
			if !slices.Contains(out, c.Fault) {
				out = append(out, c.Fault)
			}
		}
	}
	return out
}

// mergePackages joins the packages every shard ran, by import path: the
// worst result, the shards' time added up.
func mergePackages(shards []Input) []Package {
	var out []Package
	at := map[string]int{}
	for _, s := range shards {
		for _, p := range s.Report.Packages {
			i, ok := at[p.ImportPath]
			if !ok {
				at[p.ImportPath] = len(out)
				out = append(out, p)
				continue
			}
			m := &out[i]
			m.Duration += p.Duration
			m.Tests, m.Checks = max(m.Tests, p.Tests), max(m.Checks, p.Checks)
			if packageRank(p.Result) > packageRank(m.Result) {
				m.Result = p.Result
			}
		}
	}
	sort.SliceStable(out, func(i, k int) bool { return out[i].ImportPath < out[k].ImportPath })
	return out
}

func packageRank(result string) int {
	return map[string]int{"skip": 0, "pass": 1, "fail": 2, "build-failed": 3}[result]
}

// ShardNote says which shard a shard's report covers, after the
// command: " · shard 2/3 of the schedules". Empty for a whole run.
func (r *Report) ShardNote() string {
	if r.Shard == nil {
		return ""
	}
	return fmt.Sprintf(" · shard %s of the schedules", r.Shard)
}

// Worse returns the outcome a reader must see first.
func Worse(a, b Outcome) Outcome {
	rank := map[Outcome]int{OutcomeIdempotent: 0, OutcomeExpected: 1, OutcomeFlaky: 2, OutcomeFinding: 3}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// sameSteps reports whether two shards' clean runs took the same steps:
// the same statements, and effect calls of the same kinds in the same
// places. An effect call's text is left out: it may hold what differs
// from one clean run to the next (a random idempotency key), as the
// volatile effects of the check say.
func sameSteps(a, b []Step) bool {
	return slices.EqualFunc(a, b, func(x, y Step) bool {
		if x.Effect != "" || y.Effect != "" {
			return x.Effect == y.Effect && x.Fate == y.Fate
		}
		return x == y
	})
}

// explore is the fault an exploration's cell and findings carry
// (faults.NameExplore).
const explore = "explore"

// dropRepeatedExplorations drops, from the findings of one shard that
// start at from, those of an exploration that an earlier shard made
// alike (seen): each shard draws its own share of the budget, so more than
// one may shrink to the same minimal schedule, which the whole run shows
// once. The exploration's cell and the job count it once too. A shard's
// own repeats (every run of a flaky schedule) stay.
func dropRepeatedExplorations(j *Job, cells map[string]*Cell, from int, seen map[string]bool) {
	kept := j.Findings[:from]
	var mine []string
	for _, f := range j.Findings[from:] {
		key := f.Schedule + "\x00" + string(f.Outcome)
		if f.Fault == explore && seen[key] {
			j.Scenarios--
			j.Failed--
			if c := cells[explore]; c != nil {
				c.Scenarios--
				c.Failed--
			}
			continue
		}
		mine = append(mine, key)
		kept = append(kept, f)
	}
	for _, k := range mine {
		seen[k] = true
	}
	j.Findings = kept
}
