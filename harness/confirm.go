package harness

import (
	"cmp"
	"context"
	"slices"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/result"
)

// confirm runs again, on a fresh database, before the check reports it,
// every scenario that failed and every one during which the executor
// made a choice by timing (Scenario.Races): a failing scenario whose
// rerun fails the same way (the same problems) stays NotIdempotent, and
// a passing one whose rerun passes stays Idempotent; any other becomes
// Flaky, with both outcomes kept (Scenario.Rerun). A finding is then
// something the schedule does, not something that happened once, and a
// pass that a race decided is questioned as a failure is. A scenario
// that passed with no race does not run again, so a clean check costs
// nothing more.
func (r *runner) confirm(ctx context.Context, res *Result) error {
	var scheds []faults.Schedule
	var which []int
	for i, sc := range res.Scenarios {
		if sc.Rerun == nil && (sc.Verdict == result.NotIdempotent || sc.Verdict == result.Idempotent && len(sc.Races) > 0) {
			scheds = append(scheds, sc.Schedule)
			which = append(which, i)
		}
	}
	if len(scheds) == 0 {
		return nil
	}
	again, evidence, err := r.moreScenarios(ctx, scheds, res)
	if err != nil {
		return err
	}
	if evidence != nil {
		if len(res.kept) == 0 {
			// Every first run passed: the rerun's failure is the only
			// evidence there is.
			i := which[evidence.scenario]
			res.kept = append(res.kept, kept{scenario: i, db: evidence.db})
			res.Scenarios[i].Database = again[evidence.scenario].Database
		} else if err := r.giveBack(context.WithoutCancel(ctx), evidence.db); err != nil {
			// The evidence kept is the first run's failure.
			return err
		}
	}
	for k, i := range which {
		sc := &res.Scenarios[i]
		a := again[k]
		sc.Rerun = &result.Rerun{Verdict: a.Verdict, Problems: a.Problems, Order: a.Order, Deliveries: a.Deliveries, Races: a.Races}
		if sc.Verdict == result.Idempotent && a.Verdict == result.Idempotent {
			continue
		}
		if !sameProblems(sc.Problems, a.Problems) {
			sc.Verdict = result.Flaky
		}
	}
	return nil
}

// sameProblems reports whether two runs of one schedule failed the same
// way: the same kinds of problem, on the same tables, with as many
// effects missing and extra. The words of a problem (an error's text)
// may differ between runs and are not compared.
func sameProblems(a, b []result.Problem) bool {
	key := func(ps []result.Problem) []result.Problem {
		out := make([]result.Problem, 0, len(ps))
		for _, p := range ps {
			out = append(out, result.Problem{Kind: p.Kind, Table: p.Table, Missing: p.Missing, Extra: p.Extra})
		}
		slices.SortFunc(out, func(x, y result.Problem) int {
			return cmp.Or(cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.Table, y.Table),
				cmp.Compare(x.Missing, y.Missing), cmp.Compare(x.Extra, y.Extra))
		})
		return out
	}
	same := func(x, y result.Problem) bool {
		return x.Kind == y.Kind && x.Table == y.Table && x.Missing == y.Missing && x.Extra == y.Extra
	}
	return len(a) > 0 && len(b) > 0 && slices.EqualFunc(key(a), key(b), same)
}

// noStepTaken is the warning about deliveries that returned from the
// handler without taking a step although the clean run took clean steps,
// or nil: a handler that reads through the delivery's pool in one
// delivery and works through a global one in another passes unseen
// otherwise. A delivery that died, was never handed out, or failed is
// not one: it may have stopped before its first step for its own reason.
// Nor is one on a worker that an earlier delivery of its scenario ran on
// and that lives on (a lost ack): what that worker keeps in memory is
// there in production too. One on any other worker would have had a
// fresh process in production, so a Job.Handler that skipped its work
// on memory every delivery shares is one.
func noStepTaken(clean int, scenarios []result.Scenario) *result.Warning {
	if clean == 0 {
		return nil
	}
	var w *result.Warning
	for _, sc := range scenarios {
		for i, d := range sc.Deliveries {
			if d.Died || d.NotDelivered != "" || d.Err != "" || len(d.Steps) > 0 || warmWorker(sc.Deliveries[:i], d.Worker) {
				continue
			}
			if w == nil {
				w = &result.Warning{Kind: result.NoStepTaken, First: d.Delivery, Schedule: sc.Schedule, CleanSteps: clean}
			}
			w.Deliveries++
		}
	}
	return w
}

// warmWorker reports whether one of before, the deliveries that ran
// earlier, ran on worker and did not die: the worker lives on.
func warmWorker(before []result.DeliveryOutcome, worker int) bool {
	return slices.ContainsFunc(before, func(o result.DeliveryOutcome) bool { return o.Worker == worker && !o.Died && o.NotDelivered == "" })
}
