package record

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/runtwice/twice/faults"
)

// PlanEnv names a file the twice runner writes for the tests it runs: how
// each check deals its schedules to shards by cost (twice report
// -timings), or which schedules a rerun runs (twice report -rerun-failed).
// Unset, every check deals its schedules in turn and runs them all.
const PlanEnv = "TWICE_PLAN"

// Plan is the file PlanEnv names, JSON.
type Plan struct {
	// Shards is the shard count the costs were dealt for; 0 when the plan
	// deals nothing.
	Shards int `json:"shards,omitempty"`
	// Rerun is set when the plan names the schedules to run: a check runs
	// exactly its Rerun schedules, and a check the plan does not name runs
	// none.
	Rerun bool `json:"rerun,omitempty"`
	// From is the report the plan was made from, for messages.
	From string `json:"from"`
	// Checks are the checks the plan knows, in the order they were dealt.
	Checks []PlanCheck `json:"checks"`
}

// PlanCheck is what the plan says about one check: one job checked in one
// test of the package in Dir.
type PlanCheck struct {
	Dir  string `json:"dir"`
	Test string `json:"test"`
	Job  string `json:"job"`
	// Costs are, per fault, the wall time of one of its schedules in the
	// run the timings came from, in milliseconds.
	Costs map[faults.Name]float64 `json:"costs,omitempty"`
	// Loads are each shard's load, in milliseconds, from the checks
	// dealt before this one: the check deals its schedules on top of
	// them, so the shards' totals come out even across checks.
	Loads []float64 `json:"loads,omitempty"`
	// Rerun are the schedules to run again, text form, each with its
	// fault.
	Rerun []PlanSchedule `json:"rerun,omitempty"`
}

// PlanSchedule is one schedule to rerun.
type PlanSchedule struct {
	Fault    faults.Name `json:"fault"`
	Schedule string      `json:"schedule"`
}

// WritePlan writes p as the file path, for PlanEnv.
func WritePlan(path string, p *Plan) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// ReadPlan reads the plan PlanEnv names; nil when it is unset.
func ReadPlan() (*Plan, error) {
	path := os.Getenv(PlanEnv)
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the twice runner's plan %s (%s): %w", path, PlanEnv, err)
	}
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("the twice runner's plan %s (%s) is not a plan: %w", path, PlanEnv, err)
	}
	return &p, nil
}

// Check is the plan's entry for the check of job in test, run in the
// working directory; nil when the plan does not name it.
func (p *Plan) Check(test, job string) *PlanCheck {
	wd, _ := os.Getwd()
	for i, c := range p.Checks {
		if c.Test == test && c.Job == job && sameDir(c.Dir, wd) {
			return &p.Checks[i]
		}
	}
	return nil
}

func sameDir(a, b string) bool {
	if a == b {
		return true
	}
	ea, err1 := filepath.EvalSymlinks(a)
	eb, err2 := filepath.EvalSymlinks(b)
	return err1 == nil && err2 == nil && ea == eb
}

// Deal gives each schedule of a check, by its cost, to a shard: the
// costliest first, each to the shard with the least load so far (the
// lowest numbered among equals), loads counted from start. It returns
// each schedule's shard, counted from 0, and the loads after. The same
// inputs give the same deal, so every shard computes it alike and each
// takes its own.
func Deal(costs, start []float64) (owner []int, loads []float64) {
	loads = slices.Clone(start)
	owner = make([]int, len(costs))
	if len(loads) == 0 {
		return owner, loads
	}
	order := make([]int, len(costs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case costs[a] > costs[b]:
			return -1
		case costs[a] < costs[b]:
			return 1
		}
		return 0
	})
	for _, i := range order {
		least := 0
		for s := range loads {
			if loads[s] < loads[least] {
				least = s
			}
		}
		owner[i] = least
		loads[least] += costs[i]
	}
	return owner, loads
}

// ScheduleCosts are the costs of a check's schedules by their faults:
// c.Costs, and for a fault the timings did not run, the mean of the
// costs they have (1 when they have none).
func (c *PlanCheck) ScheduleCosts(faultOf []faults.Name) []float64 {
	fallback, n := 0.0, 0
	for _, v := range c.Costs {
		fallback += v
		n++
	}
	if n > 0 {
		fallback /= float64(n)
	} else {
		fallback = 1
	}
	out := make([]float64, len(faultOf))
	for i, f := range faultOf {
		v, ok := c.Costs[f]
		if !ok {
			v = fallback
		}
		out[i] = v
	}
	return out
}
