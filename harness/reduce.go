package harness

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/internal/record"
	"github.com/runtwice/twice/internal/render"
)

// The concurrent faults run one interleaving of each class of equivalent
// ones (faults.Free says which steps the reduction may move), decided
// from the clean run's steps. A delivery may take other steps than the
// clean run did: it sees the other delivery's writes, or its attempt
// number. So once a reduced fault's scenarios have run, the harness looks
// at the steps each of their two deliveries actually asked for, and when
// one at a position the reduction moved is not local (or missing), it
// runs the orders the reduction left out as well: the verdict is never
// weaker than without the reduction.

// Reduction and Divergence say what the reduction did to a concurrent
// fault; Result.Reductions holds them.
type (
	Reduction  = record.Reduction
	Divergence = record.Divergence
)

// askedSteps keeps, by schedule text, the steps each of a scenario's
// first two deliveries asked for, in that order (a delivery's completed
// steps are in completion order, which a lock wait can change).
type askedSteps struct {
	mu    sync.Mutex
	steps map[string][2][]faults.Step
}

// note keeps ex's deliveries' steps when its schedule interleaves two of
// them; Explore's schedules are never reduced.
func (a *askedSteps) note(sched faults.Schedule, ex *execution) {
	if len(sched.Order) == 0 || len(ex.deliveries) < 2 || sched.Fault == faults.NameExplore {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.steps == nil {
		a.steps = map[string][2][]faults.Step{}
	}
	a.steps[sched.String()] = [2][]faults.Step{ex.deliveries[0].asked, ex.deliveries[1].asked}
}

func (a *askedSteps) of(sched faults.Schedule) ([2][]faults.Step, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.steps[sched.String()]
	return s, ok
}

// confirmReductions records, for every fault of the check that the
// reduction thinned, how many orders it left out, and runs them after
// all, appended to res.Scenarios, when a delivery of one of the fault's
// scenarios diverged from the steps the reduction assumed.
func (r *runner) confirmReductions(ctx context.Context, plan faults.Plan, res *Result) error {
	unreduced := plan
	unreduced.Unreduced = true
	free := faults.Free(plan.Steps)
	// The orders left out take places after the check's schedules, every
	// reduced fault's in turn whether it falls back or not, so a scenario
	// has the same place (Scenario.Index) in every shard and unsharded,
	// and a shard runs only the places dealt to it.
	next := len(res.Scenarios)
	if res.Shard != nil {
		next = res.Shard.Schedules
	}
	for _, f := range r.cfg.faults() {
		ran := f.Schedules(plan)
		pruned := without(f.Schedules(unreduced), ran)
		if len(pruned) == 0 {
			continue
		}
		first := next
		next += len(pruned)
		red := Reduction{Fault: f.Name(), Orders: len(ran), Pruned: len(pruned)}
		for _, s := range ran {
			asked, ok := r.asked.of(s)
			if !ok {
				continue // not run by this check (a shard of it, say)
			}
			if red.Diverged = diverged(s, free, asked); red.Diverged != nil {
				break
			}
		}
		res.Reductions = append(res.Reductions, red)
		if red.Diverged != nil {
			var mine []faults.Schedule
			var places []int
			for j, s := range pruned {
				if res.Shard == nil || res.Shard.Has(first+j) {
					mine, places = append(mine, s), append(places, first+j)
				}
			}
			if err := r.runMore(ctx, mine, places, res); err != nil {
				return err
			}
		}
	}
	return nil
}

// without returns the schedules of all that are not in some, by text.
func without(all, some []faults.Schedule) []faults.Schedule {
	in := map[string]bool{}
	for _, s := range some {
		in[s.String()] = true
	}
	var out []faults.Schedule
	for _, s := range all {
		if !in[s.String()] {
			out = append(out, s)
		}
	}
	return out
}

// diverged returns the first place where one of the two deliveries of
// sched did not take what the reduction assumed of a free position k:
// steps k and, before it, k-1 local, and a step k+1 after it (a
// delivery's end, with its connections closed and, with a queue, its ack,
// is not something the reduction may move). nil when both did.
func diverged(sched faults.Schedule, free []bool, asked [2][]faults.Step) *Divergence {
	for d, steps := range asked {
		at := func(k int) *Divergence {
			div := &Divergence{Schedule: sched, Delivery: d + 1, Step: k}
			if k <= len(steps) {
				div.Took = new(steps[k-1])
			}
			return div
		}
		for i, f := range free {
			k := i + 1
			if !f {
				continue
			}
			for _, p := range []int{k - 1, k} {
				if p >= 1 && (p > len(steps) || !faults.Local(steps[p-1])) {
					return at(p)
				}
			}
			if k+1 > len(steps) {
				return at(k)
			}
		}
	}
	return nil
}

// runMore runs scheds after the scenarios already in res and appends
// theirs, at places (Scenario.Index) places. A database kept as evidence
// stays the first failure's.
func (r *runner) runMore(ctx context.Context, scheds []faults.Schedule, places []int, res *Result) error {
	if len(scheds) == 0 {
		return nil
	}
	if p := progressOf(ctx); p != nil {
		p.total.Add(int64(len(scheds)))
	}
	more := &Result{Result: res.Result}
	more.Scenarios = make([]Scenario, len(scheds))
	err := r.scenarios(ctx, scheds, more)
	for i := range more.Scenarios {
		more.Scenarios[i].Index = places[i]
	}
	offset := len(res.Scenarios)
	res.Scenarios = append(res.Scenarios, more.Scenarios...)
	var errs []error
	for _, k := range more.kept {
		if len(res.kept) == 0 {
			k.scenario += offset
			res.kept = append(res.kept, k)
			continue
		}
		errs = append(errs, k.db.Drop(ctx))
		res.Scenarios[offset+k.scenario].Database = ""
	}
	return errors.Join(append([]error{err}, errs...)...)
}

// reductionLines say, one line per reduced fault, what the reduction did,
// for the log of a passing check under -v.
func reductionLines(res *Result) []string {
	var out []string
	for _, red := range res.Reductions {
		line := fmt.Sprintf("%s: %d %s run, %d left out as equivalent to one run", red.Fault,
			red.Orders, render.Plural(red.Orders, "interleaving"), red.Pruned)
		if d := red.Diverged; d != nil {
			what := fmt.Sprintf("took no step %d", d.Step)
			switch {
			case d.Took != nil && faults.Local(*d.Took):
				what = fmt.Sprintf("ended right after step %d (%s)", d.Step, render.OneLine(render.Step(*d.Took)))
			case d.Took != nil:
				what = fmt.Sprintf("took step %d: %s", d.Step, render.OneLine(render.Step(*d.Took)))
			}
			line = fmt.Sprintf("%s: delivery %d of %s %s, not the local step the reduction assumed there, so the %d %s left out ran too",
				red.Fault, d.Delivery, d.Schedule, what, red.Pruned, render.Plural(red.Pruned, "interleaving"))
		}
		out = append(out, line)
	}
	return out
}
