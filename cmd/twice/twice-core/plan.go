package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/record"
	"github.com/runtwice/twice/internal/report"
)

// maxMatrix is the most jobs GitHub Actions makes of one matrix.
const maxMatrix = 256

// planner makes the plan the tests of one run read (record.PlanEnv) once
// go list has named the packages: dirs maps a package directory to its
// import path.
type planner func(dirs map[string]string) (*record.Plan, error)

// timingsPlanner deals each check's schedules to shards by the cost its
// faults' schedules had in the report at from (twice report -timings).
func timingsPlanner(from string, shards int) (planner, error) {
	prev, err := readTimings(from)
	if err != nil {
		return nil, err
	}
	return func(dirs map[string]string) (*record.Plan, error) {
		p, _ := dealByCost(prev, from, shards, byImportPath(dirs))
		return p, nil
	}, nil
}

// readTimings reads the report -timings names: a whole run's or a merged
// one, which timed every schedule.
func readTimings(path string) (*report.Report, error) {
	prev, err := readReportFile(path, "the timings' report")
	if err != nil {
		return nil, err
	}
	if prev.Shard != nil {
		return nil, blame.Userf("-timings %s is the report of shard %d/%d, which timed only its own schedules; join the shards' reports with twice report -merge and pass the merged report.json", path, prev.Shard.Index, prev.Shard.Count)
	}
	return prev, nil
}

// dealByCost is the plan that deals the checks of prev, in their order
// by package, test and job, to shards, each on top of the loads the
// checks before it left (record.Deal), as each shard's tests will. A
// check whose package is not in dirOf (no longer run) is left out.
// loads are each shard's total after the last check, in milliseconds.
func dealByCost(prev *report.Report, from string, shards int, dirOf map[string]string) (p *record.Plan, loads []float64) {
	p = &record.Plan{Shards: shards, From: from}
	jobs := slices.Clone(prev.Jobs)
	slices.SortStableFunc(jobs, func(a, b report.Job) int {
		return cmp.Or(strings.Compare(a.Package, b.Package), strings.Compare(a.Test, b.Test), strings.Compare(a.Name, b.Name))
	})
	loads = make([]float64, shards)
	for _, j := range jobs {
		dir, ok := dirOf[j.Package]
		if !ok {
			continue
		}
		c := record.PlanCheck{Dir: dir, Test: j.Test, Job: j.Name, Costs: map[faults.Name]float64{}, Loads: slices.Clone(loads)}
		var costs []float64
		for _, cell := range j.Cells {
			if cell.Scenarios == 0 {
				continue
			}
			// A cell's time is its first run's (-count runs the check
			// more), its scenarios the distinct schedules.
			each := float64(cell.Duration) / float64(cell.Scenarios)
			c.Costs[faults.Name(cell.Fault)] = each
			for range cell.Scenarios {
				costs = append(costs, each)
			}
		}
		_, loads = record.Deal(costs, loads)
		p.Checks = append(p.Checks, c)
	}
	return p, loads
}

// rerunPlanner runs again exactly the schedules that failed in the
// report at from (twice report -rerun-failed): it returns the plan, the
// packages to test and the -run pattern of their tests.
func rerunPlanner(from string) (planner, []string, string, error) {
	prev, err := readReportFile(from, "the report to rerun")
	if err != nil {
		return nil, nil, "", err
	}
	type check struct{ pkg, test, job string }
	failed := map[check][]record.PlanSchedule{}
	var order []check
	for _, j := range prev.Jobs {
		if j.Outcome != report.OutcomeFinding && j.Outcome != report.OutcomeFlaky {
			continue
		}
		k := check{j.Package, j.Test, j.Name}
		for _, f := range j.Findings {
			if f.Outcome != report.OutcomeFinding && f.Outcome != report.OutcomeFlaky {
				continue
			}
			if _, seen := failed[k]; !seen {
				order = append(order, k)
			}
			failed[k] = append(failed[k], record.PlanSchedule{Fault: faults.Name(f.Fault), Schedule: f.Schedule})
		}
	}
	if len(order) == 0 {
		return nil, nil, "", errNothingFailed
	}
	var pkgs, tests []string
	for _, k := range order {
		if !slices.Contains(pkgs, k.pkg) {
			pkgs = append(pkgs, k.pkg)
		}
		top, _, _ := strings.Cut(k.test, "/")
		if top = "^" + regexp.QuoteMeta(top) + "$"; !slices.Contains(tests, top) {
			tests = append(tests, top)
		}
	}
	plan := func(dirs map[string]string) (*record.Plan, error) {
		dirOf := byImportPath(dirs)
		p := &record.Plan{Rerun: true, From: from}
		for _, k := range order {
			dir, ok := dirOf[k.pkg]
			if !ok {
				return nil, blame.Userf("%s names package %s, which go list no longer finds here; run twice report -rerun-failed where that report was written", from, k.pkg)
			}
			p.Checks = append(p.Checks, record.PlanCheck{Dir: dir, Test: k.test, Job: k.job, Rerun: failed[k]})
		}
		return p, nil
	}
	return plan, pkgs, strings.Join(tests, "|"), nil
}

// errNothingFailed: the report to rerun holds no failing schedule.
var errNothingFailed = errors.New("no failing schedule")

// byImportPath turns go list's directory → import path map around.
func byImportPath(dirs map[string]string) map[string]string {
	out := make(map[string]string, len(dirs))
	for dir, path := range dirs {
		out[path] = dir
	}
	return out
}

// planCommand is twice plan: it prints the CI matrix of a run split into
// shards, as JSON, one entry per shard.
func planCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("twice plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	shards := fs.Int("shards", 0, "split the run into `n` shards, 1 to 256")
	timings := fs.String("timings", "", "a previous run's report.json (or its directory), merged if it was sharded: each entry then says the load, in milliseconds, its shard is dealt")
	if err := fs.Parse(args); err != nil {
		return report.ExitBroken
	}
	if fs.NArg() > 0 {
		say(stderr, "twice plan takes no packages (%s): the matrix names shards, and each shard runs every package's share", strings.Join(fs.Args(), " "))
		return report.ExitBroken
	}
	if *shards < 1 || *shards > maxMatrix {
		say(stderr, "twice plan -shards %d: want 1 to %d shards (GitHub Actions makes at most %d jobs of a matrix)", *shards, maxMatrix, maxMatrix)
		return report.ExitBroken
	}
	m, err := matrix(*shards, *timings)
	if err != nil {
		sayErr(stderr, err)
		return report.ExitBroken
	}
	b, err := json.Marshal(m)
	if err != nil {
		sayErr(stderr, fmt.Errorf("the matrix: %w", err))
		return report.ExitBroken
	}
	_, _ = fmt.Fprintf(stdout, "%s\n", b)
	return 0
}

// ciMatrix is a GitHub Actions matrix: {"include": [{...}, ...]}, one
// job per entry.
type ciMatrix struct {
	Include []matrixEntry `json:"include"`
}

// matrixEntry is one shard's job: twice report -shard takes Shard as it
// is. Load is what the timings deal it, when they were given.
type matrixEntry struct {
	Shard  string `json:"shard"`
	Index  int    `json:"index"`
	LoadMs int64  `json:"load_ms,omitempty"`
}

func matrix(shards int, timings string) (ciMatrix, error) {
	var loads []float64
	if timings != "" {
		prev, err := readTimings(timings)
		if err != nil {
			return ciMatrix{}, err
		}
		every := map[string]string{}
		for _, j := range prev.Jobs {
			every[j.Package] = j.Package
		}
		_, loads = dealByCost(prev, timings, shards, every)
	}
	var m ciMatrix
	for i := 1; i <= shards; i++ {
		e := matrixEntry{Shard: fmt.Sprintf("%d/%d", i, shards), Index: i}
		if loads != nil {
			e.LoadMs = int64(loads[i-1] + 0.5)
		}
		m.Include = append(m.Include, e)
	}
	return m, nil
}
