package execute

import (
	"context"
	"fmt"

	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/text"
	"github.com/runtwice/twice/internal/wireproxy"
)

// A held step (faults.Schedule.Holds) is an autocommit statement that
// runs inside a transaction the delivery's proxy opens around it: once it
// has run, its commit waits while the next step granted, of another
// delivery, runs; when that one has finished, or waits on a lock (the
// held statement's, as like as not), or cannot come, the held one
// commits and its client gets its reply. Both statements then ran on
// snapshots taken before either committed. While it waits the holder
// counts as blocked: it takes no turn.

// canHold reports whether req, granted to d with its commit held, can be
// held; when it cannot, the delivery's outcome says why and the step
// runs as it is.
func (e *execution) canHold(d *deliveryRun, req *stepRequest) bool {
	why := req.step.Unholdable
	switch {
	case req.effect:
		why = "it is an effect call, not a statement"
	case e.holder != nil:
		why = fmt.Sprintf("step %d of %s is held already", e.holder.seq, e.holder.d.spec.Label())
	}
	if why == "" {
		return true
	}
	if d.outcome.Unheld == "" {
		d.outcome.Unheld = fmt.Sprintf("step %d ran as it is (%s): %s", req.seq, text.OneLine(req.step.SQL), why)
	}
	return false
}

// held marks d's granted statement s as run with its commit held: it
// counts as done, and the next step granted to another delivery is the
// one its commit waits for.
func (e *execution) held(d *deliveryRun, s wireproxy.Step) {
	req := d.bySQL[s.Index]
	f := d.inflight[req]
	if req == nil || f == nil {
		return
	}
	req.step.CommitPoint = req.step.CommitPoint || s.CommitPoint
	req.ran, req.stepAt = true, len(d.steps)
	req.end = result.CommitHeld
	f.held = true
	d.done++
	d.steps = append(d.steps, req.asStep())
	e.holder, e.watch = req, nil
}

// watchEnded releases the held commit when req, the step granted after
// it, has finished, waits on a lock, or will never run.
func (e *execution) watchEnded(req *stepRequest) {
	if e.holder != nil && req == e.watch {
		e.releaseHold()
	}
}

// checkLostReplies asks whether a statement applied with its reply lost
// (an ambiguous fault) that a held commit may be waiting on waits on a
// lock. Such a statement is not in flight for the executor, which grants
// on beside it, but its delivery waits for the reply, which cannot come
// before the held transaction ends if the lock is the held statement's.
// Two ways lead there: the step granted after the hold is the ambiguous
// one (the hold waits for it: it is released at once), or the ambiguous
// one was granted first and reached the lock after the held statement,
// granted next, took it (the hold waits for a step its delivery will
// never ask for: the delivery counts as blocked, and grant releases the
// hold when no other one can step).
func (e *execution) checkLostReplies(ctx context.Context) error {
	for _, req := range e.lostRepliesBesideHold() {
		waits, err := e.waitsOnLock(ctx, req.step.PID)
		if err != nil {
			return err
		}
		if !waits {
			continue
		}
		req.waited = true
		if req == e.watch {
			e.releaseHold()
			return nil
		}
	}
	return nil
}

// lostRepliesBesideHold lists the lost replies checkLostReplies asks
// about: none without a hold; the watched step, when the hold has one;
// before it has, every other delivery's not yet seen waiting.
func (e *execution) lostRepliesBesideHold() []*stepRequest {
	switch {
	case e.holder == nil:
		return nil
	case e.watch != nil:
		if e.watch == e.watch.d.lostReply {
			return []*stepRequest{e.watch}
		}
		return nil
	}
	var out []*stepRequest
	for _, d := range e.deliveries {
		if d != e.holder.d && d.life.live() && d.lostReply != nil && !d.lostReply.waited {
			out = append(out, d.lostReply)
		}
	}
	return out
}

// releaseHold lets the held step commit; until its reply comes it runs
// again, so nothing else is granted meanwhile.
func (e *execution) releaseHold() {
	h := e.holder
	e.holder, e.watch = nil, nil
	if f := h.d.inflight[h]; f != nil {
		f.held = false
	}
	e.world.commit(h.d)
	e.releases++
}

// dropHolds forgets holds that involve d, which ended: its own held step
// (its connections are cut) or the step the hold waited for.
func (e *execution) dropHolds(d *deliveryRun) {
	switch {
	case e.holder == nil:
	case e.holder.d == d:
		e.holder, e.watch = nil, nil
	case e.watch != nil && e.watch.d == d:
		e.releaseHold()
	}
}

// anotherCanStep reports whether a delivery other than d has started and
// not ended, so it may still ask for a step the hold can wait for: not
// one whose lost reply waits on a lock (checkLostReplies).
func (e *execution) anotherCanStep(d *deliveryRun) bool {
	for _, o := range e.deliveries {
		if o != d && o.life.live() && !o.blocked() && (o.lostReply == nil || !o.lostReply.waited) {
			return true
		}
	}
	return false
}
