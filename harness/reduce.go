package harness

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/freshdb"
	"github.com/runtwice/twice/internal/render"
	"github.com/runtwice/twice/internal/text"
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
//
// crash-mid-job and redrive crash once per class of crash points that
// end in the same state (faults.CrashClass: no commit point or effect
// call between them), at the class's last point. Its crashed delivery
// ran every step of the class; when one of them is not the clean run's
// statement, or is an effect call or a commit point, the crash points
// left out run as well (confirmClasses).

// confirmReductions records, for every fault of the check that the
// reduction thinned (each expanded once, into expanded), how many orders
// it left out, and runs them after all, appended to res.Scenarios, when
// one of the fault's scenarios broke what the reduction assumed: a
// delivery diverged from the steps the partial-order reduction assumed,
// or a queue that hands a job to one delivery at a time
// (plan.OneDeliveryAtATime) handed out the second.
func (r *runner) confirmReductions(ctx context.Context, plan faults.Plan, expanded []faults.Expansion, res *Result) error {
	free := faults.Free(plan.Steps)
	// The orders left out take places after the check's schedules, every
	// reduced fault's in turn whether it falls back or not (first those
	// left out for the queue's one delivery at a time, then those the
	// partial-order reduction left out), so a scenario has the same place
	// (Scenario.Index) in every shard and unsharded, and a shard runs
	// only the places dealt to it.
	next := len(res.Scenarios)
	if res.Shard != nil {
		next = res.Shard.Schedules
	}
	for _, f := range expanded {
		ran, refused, pruned := f.Run, f.Refused, f.Pruned
		if len(refused)+len(pruned) == 0 {
			continue
		}
		if len(f.Pauses) > 0 || len(f.Classes) > 0 {
			confirm := r.confirmClasses
			if len(f.Pauses) > 0 {
				confirm = r.confirmPauses
			}
			prunedAt := next
			next += len(pruned)
			if err := confirm(ctx, plan, f, dealt(pruned, prunedAt, res), res); err != nil {
				return err
			}
			continue
		}
		refusedAt := next
		prunedAt := refusedAt + len(refused)
		next = prunedAt + len(pruned)
		red := result.Reduction{Fault: f.Fault, Orders: len(ran), Pruned: len(refused) + len(pruned), Refused: len(refused)}
		checked := ran
		if len(refused) > 0 {
			handed, err := r.handedOut(ctx, ran, res)
			if err != nil {
				return err
			}
			if red.HandedOut = handed; handed == nil {
				// The second delivery never ran, so no order of its steps
				// can matter: the partial-order reduction has nothing to
				// confirm.
				res.Reductions = append(res.Reductions, red)
				continue
			}
			if err := r.runMore(ctx, dealt(refused, refusedAt, res), res); err != nil {
				return err
			}
			checked = append(slices.Clone(ran), refused...)
		}
		for _, s := range checked {
			a, ok := r.asked.of(s)
			if !ok {
				continue // not run by this check (a shard of it, say)
			}
			if red.Diverged = diverged(s, free, a.steps); red.Diverged != nil {
				break
			}
		}
		res.Reductions = append(res.Reductions, red)
		if red.Diverged != nil {
			if err := r.runMore(ctx, dealt(pruned, prunedAt, res), res); err != nil {
				return err
			}
		}
	}
	return nil
}

// confirmClasses records what the crash classes of f (crash-mid-job or
// redrive, see faults.CrashClass) left out, and runs it, as more, when a
// class's representative took, inside its class, other steps than the
// clean run did. A shard that was not dealt a representative runs it too,
// only to learn that, and leaves it out of its result, so every shard
// decides alike.
func (r *runner) confirmClasses(ctx context.Context, plan faults.Plan, f faults.Expansion, more placed, res *Result) error {
	red := result.Reduction{Fault: f.Fault, Orders: len(f.Run), Pruned: len(f.Pruned), Classes: f.Classes}
	for _, c := range f.Classes {
		a, ok := r.asked.of(c.Run)
		if !ok {
			_, db, err := r.scenario(ctx, c.Run, res)
			if err == nil && db != nil {
				err = r.giveBack(ctx, db)
			}
			if err != nil {
				return err
			}
			if a, ok = r.asked.of(c.Run); !ok {
				return fmt.Errorf("%s: the steps of %s were not recorded", f.Fault, c.Run)
			}
		}
		if at := c.Differs(plan.Steps, a.steps[0]); at != 0 {
			red.Diverged = &result.Divergence{Schedule: c.Run, Delivery: 1, At: at}
			if at <= len(a.steps[0]) {
				red.Diverged.Took = new(a.steps[0][at-1])
			}
			break
		}
	}
	res.Reductions = append(res.Reductions, red)
	if red.Diverged == nil {
		return nil
	}
	return r.runMore(ctx, more, res)
}

// confirmPauses records what the pause classes of visibility-timeout (see
// faults.PauseClass) left out, and runs it, as more, when a class's
// representative did not show its second delivery waiting on the first
// one's locks. A shard that was not dealt a representative runs it too,
// only to learn that, and leaves it out of its result.
func (r *runner) confirmPauses(ctx context.Context, plan faults.Plan, f faults.Expansion, more placed, res *Result) error {
	red := result.Reduction{Fault: f.Fault, Orders: len(f.Run), Pruned: len(f.Pruned), Pauses: f.Pauses}
	ran := map[string]result.Scenario{}
	for _, sc := range res.Scenarios {
		ran[sc.Schedule.String()] = sc
	}
	for _, c := range f.Pauses {
		sc, ok := ran[c.Run.String()]
		if !ok {
			var db *freshdb.Database
			var err error
			sc, db, err = r.scenario(ctx, c.Run, res)
			if err == nil && db != nil {
				err = r.giveBack(ctx, db)
			}
			if err != nil {
				return err
			}
		}
		a, ok := r.asked.of(c.Run)
		if !ok || !c.Waited(plan.Steps, a.steps, sc.Order, sc.LockWaits) {
			red.Unwaited = new(c.Run)
			break
		}
	}
	res.Reductions = append(res.Reductions, red)
	if red.Unwaited == nil {
		return nil
	}
	return r.runMore(ctx, more, res)
}

// handedOut returns the first of scheds whose second delivery the queue
// handed out, nil when it refused every one. A shard that was not dealt
// one of them runs it too, only to learn that, and leaves it out of its
// result: every shard then decides alike and runs its share of the
// orders left out.
func (r *runner) handedOut(ctx context.Context, scheds []faults.Schedule, res *Result) (*faults.Schedule, error) {
	for _, s := range scheds {
		a, ok := r.asked.of(s)
		if !ok {
			_, db, err := r.scenario(ctx, s, res)
			if err == nil && db != nil {
				err = r.giveBack(ctx, db)
			}
			if err != nil {
				return nil, err
			}
			a, ok = r.asked.of(s)
		}
		if !ok || a.handedOut {
			return &s, nil
		}
	}
	return nil, nil
}

// placed are schedules to run at given places (Scenario.Index).
type placed struct {
	scheds []faults.Schedule
	places []int
}

// dealt returns the schedules of scheds, which take places from first
// on, that are this check's to run: all of them unsharded, those dealt
// to its shard otherwise.
func dealt(scheds []faults.Schedule, first int, res *Result) placed {
	var out placed
	for j, s := range scheds {
		if res.Shard == nil || res.Shard.Has(first+j) {
			out.scheds, out.places = append(out.scheds, s), append(out.places, first+j)
		}
	}
	return out
}

// diverged returns the first place where one of the two deliveries of
// sched did not take what the reduction assumed of a free position k:
// steps k and, before it, k-1 local, and a step k+1 after it (a
// delivery's end, with its connections closed and, with a queue, its ack,
// is not something the reduction may move). nil when both did.
func diverged(sched faults.Schedule, free []bool, asked [2][]faults.Step) *result.Divergence {
	for d, steps := range asked {
		at := func(k int) *result.Divergence {
			div := &result.Divergence{Schedule: sched, Delivery: d + 1, At: k}
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
				if p >= 1 && (p > len(steps) || !steps[p-1].Local) {
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

// runMore runs more's schedules after the scenarios already in res and
// appends theirs, at more's places (Scenario.Index). A database kept as
// evidence stays the first failure's.
func (r *runner) runMore(ctx context.Context, more placed, res *Result) error {
	scheds, places := more.scheds, more.places
	if len(scheds) == 0 {
		return nil
	}
	scs, evidence, err := r.moreScenarios(ctx, scheds, res)
	if err != nil {
		return err
	}
	for i := range scs {
		scs[i].Index = places[i]
	}
	offset := len(res.Scenarios)
	res.Scenarios = append(res.Scenarios, scs...)
	switch {
	case evidence == nil:
	case len(res.kept) == 0:
		evidence.scenario += offset
		res.kept = append(res.kept, *evidence)
	default:
		res.Scenarios[offset+evidence.scenario].Database = ""
		return r.giveBack(ctx, evidence.db)
	}
	return nil
}

// reductionLines say, one line per reduced fault (two when both of its
// reductions fell back), what the reduction did, for the log of a
// passing check under -v.
func reductionLines(res *Result) []string {
	var out []string
	for _, red := range res.Reductions {
		if len(red.Classes) > 0 {
			out = append(out, classLine(red))
			continue
		}
		if len(red.Pauses) > 0 {
			out = append(out, pauseLine(red))
			continue
		}
		orders, pruned := red.Orders, red.Pruned-red.Refused
		if red.Refused > 0 {
			if red.HandedOut == nil {
				out = append(out, fmt.Sprintf("%s: %d %s run, %d left out: the queue hands a job to one delivery at a time and refused the second delivery, so their order cannot matter",
					red.Fault, red.Orders, text.Plural(red.Orders, "interleaving"), red.Pruned))
				continue
			}
			out = append(out, fmt.Sprintf("%s: the queue handed out delivery 2 of %s although it hands a job to one delivery at a time (queue.Rules.OneDeliveryAtATime), so the %d %s left out for that ran too",
				red.Fault, *red.HandedOut, red.Refused, text.Plural(red.Refused, "interleaving")))
			orders += red.Refused
			if pruned == 0 {
				continue
			}
		}
		line := fmt.Sprintf("%s: %d %s run, %d left out as equivalent to one run", red.Fault,
			orders, text.Plural(orders, "interleaving"), pruned)
		if d := red.Diverged; d != nil {
			what := fmt.Sprintf("took no step %d", d.At)
			switch {
			case d.Took != nil && d.Took.Local:
				what = fmt.Sprintf("ended right after step %d (%s)", d.At, text.OneLine(render.Step(*d.Took)))
			case d.Took != nil:
				what = fmt.Sprintf("took step %d: %s", d.At, text.OneLine(render.Step(*d.Took)))
			}
			line = fmt.Sprintf("%s: delivery %d of %s %s, not the local step the reduction assumed there, so the %d %s left out ran too",
				red.Fault, d.Delivery, d.Schedule, what, pruned, text.Plural(pruned, "interleaving"))
		}
		out = append(out, line)
	}
	return out
}

// classLine says what the crash classes of one fault did: "crash-mid-job:
// 66 crash points at steps 1..66, with no commit point or effect call
// between them, end in the same state: one run (j1a1w1!crash:66 > +30s
// j1a2w2); 1 crash point run in all, 65 left out".
func classLine(red result.Reduction) string {
	if d := red.Diverged; d != nil {
		what := fmt.Sprintf("took no step %d", d.At)
		if d.Took != nil {
			what = fmt.Sprintf("took step %d: %s", d.At, text.OneLine(render.Step(*d.Took)))
		}
		return fmt.Sprintf("%s: delivery %d of %s %s, not the clean run's statement its crash class assumed there, so the %d crash %s left out ran too",
			red.Fault, d.Delivery, d.Schedule, what, red.Pruned, text.Plural(red.Pruned, "point"))
	}
	var classes []string
	for _, c := range red.Classes {
		classes = append(classes, fmt.Sprintf("the %d crash points at steps %d..%d, with no commit point or effect call between them, end in the same state: one run (%s)",
			c.Members(), c.From, c.To, c.Run))
	}
	return fmt.Sprintf("%s: %s; %d crash %s run in all, %d left out", red.Fault, strings.Join(classes, "; "),
		red.Orders, text.Plural(red.Orders, "point"), red.Pruned)
}

// pauseLine says what the pause classes of visibility-timeout did.
func pauseLine(red result.Reduction) string {
	if red.Unwaited != nil {
		return fmt.Sprintf("%s: in %s the second delivery did not wait on the first one's locks, as its pause class assumed, so the %d pause %s left out ran too",
			red.Fault, *red.Unwaited, red.Pruned, text.Plural(red.Pruned, "point"))
	}
	var classes []string
	for _, c := range red.Pauses {
		classes = append(classes, fmt.Sprintf("the pauses after steps %d..%d, inside one transaction, end alike as the second delivery waited on the first one's locks: one run (%s)",
			c.From, c.To, c.Run))
	}
	return fmt.Sprintf("%s: %s; %d pause %s run in all, %d left out", red.Fault, strings.Join(classes, "; "),
		red.Orders, text.Plural(red.Orders, "point"), red.Pruned)
}
