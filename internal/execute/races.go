package execute

import (
	"slices"

	"github.com/runtwice/twice/harness/result"
)

// Races. The executor decides most of a scenario: which step goes next,
// when a delivery starts, what a fault does. Where it cannot, it takes
// what came first, and that is timing: a step granted while another
// delivery's statement waits on a lock or runs with its reply lost (the
// server picks which goes on first), a wall-clock limit that ran out
// before a delivery reacted, two handlers that had both returned when
// the first return was taken. Each such choice is recorded
// (Output.Races), so the harness runs the schedule again whichever way
// it went: one run's verdict is not the schedule's.

// raced records a race of kind that went to d, against other (nil for
// a timer), about d's step seq (0: none): the first of each kind between
// the same two deliveries, which is enough to run the schedule again.
func (e *execution) raced(kind result.RaceKind, d, other *deliveryRun, seq int) {
	r := result.Race{Kind: kind, Delivery: d.n, Step: seq}
	if other != nil {
		r.Other = other.n
	}
	if !slices.ContainsFunc(e.races, func(o result.Race) bool {
		return o.Kind == r.Kind && o.Delivery == r.Delivery && o.Other == r.Other
	}) {
		e.races = append(e.races, r)
	}
}

// grantedBeside records, as req is granted to d, each other delivery
// whose step is still in flight beside it: one that waits on a lock may
// go on before or after req, as the server lets it, and one applied with
// its reply lost may still run. A held statement has run and waits for
// its commit, which the executor lets through itself: no race.
func (e *execution) grantedBeside(d *deliveryRun, req *stepRequest) {
	for _, o := range e.deliveries {
		if o == d || o.life.over() {
			continue
		}
		beside := o.lostReply != nil
		for _, f := range o.inflight {
			beside = beside || !f.held
		}
		if beside {
			e.raced(result.StepBeside, d, o, req.seq)
		}
	}
	if q := e.queue; q != nil && q.running != nil && q.blocked {
		// The queue's operation for q.running.d waits on a lock.
		e.raced(result.StepBeside, d, q.running.d, req.seq)
	}
}

// returnedBeside records, as d's return is taken, every other delivery
// whose handler has returned too and whose return is still to be taken:
// which of the two the queue hears first is the order their events came
// in.
func (e *execution) returnedBeside(d *deliveryRun) {
	for _, o := range e.deliveries {
		if o != d && o.life.acting() && o.handlerDone.Load() {
			e.raced(result.ReturnsRaced, d, o, 0)
		}
	}
}

// gaveUp takes back req, whose requester stopped waiting for its grant
// (its context ended: the handler's, or, for an HTTP call, the client's
// request): its statement or call is never made. Left waiting, it would
// be granted later into nothing, and, never ending, hold every other
// step back until its delivery ended. Unless the executor cancelled the
// delivery itself, the requester's own timer decided; and when the grant
// went out as the requester gave up, the two crossed, and which one the
// requester saw was timing.
func (e *execution) gaveUp(d *deliveryRun, req *stepRequest) {
	if i := slices.Index(d.pending, req); i >= 0 {
		d.pending = slices.Delete(d.pending, i, i+1)
		if d.life != cancelled {
			// Not the executor's cancel: the requester's own clock (an
			// HTTP client's timeout) ran out while the schedule held
			// the step, which a run where its turn came sooner would not
			// see.
			e.raced(result.TimerFired, d, nil, req.seq)
		}
		return
	}
	if _, ok := d.inflight[req]; !ok || d.life.over() {
		return // it ended, or its delivery did
	}
	e.raced(result.GrantCrossed, d, nil, req.seq)
	delete(d.inflight, req)
	if !req.effect {
		delete(d.bySQL, req.step.Index)
	}
	e.watchEnded(req)
	e.events.poke()
}
