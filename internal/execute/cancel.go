package execute

import (
	"fmt"
	"time"

	"github.com/runtwice/twice/harness/result"
)

// Cancelling a delivery that runs too long. A queue with
// queue.Rules.CancelAfter (queue.Model with CancelAtVisibilityTimeout for
// a job without an adapter) cancels a delivery's context once the harness
// clock has moved that far past its start, before the job is handed out
// again: so a
// handler that honours its context is judged as it runs in production
// (asynq and River cancel at their deadlines; gue at its TTL). The next
// delivery waits until the cancelled ones have reacted (returned, or
// asked for another step, which shows they ignore their context), or
// cancelGrace has passed.

// cancelPolicy says when, and on whose behalf, the execution cancels a
// running delivery; after zero never.
type cancelPolicy struct {
	after time.Duration
	by    string // "by the queue", "at the visibility timeout,": how Fault says it
}

// cancelPolicyOf is the queue's CancelAfter: an adapter's, or
// queue.Model's visibility timeout when CancelAtVisibilityTimeout asks for
// it.
func (r *Executor) cancelPolicyOf() cancelPolicy {
	if r.job.Queue == nil {
		return cancelPolicy{after: r.cfg.Rules.CancelAfter, by: "at the visibility timeout,"}
	}
	return cancelPolicy{after: r.cfg.Rules.CancelAfter, by: "by the queue"}
}

// cancelOverdue marks every running delivery that has run the policy's
// time on the harness clock, and reports whether it marked any. A marked
// delivery's context is cancelled where its handler waits on the harness
// (see cancelIfWaiting): cancelled while a reply is on its way, the
// handler would see its step fail or not by a race.
func (e *execution) cancelOverdue() bool {
	if e.cancels.after <= 0 {
		return false
	}
	marked := false
	for _, o := range e.deliveries {
		if o.life != running {
			continue
		}
		if e.clock.Now().Sub(o.clockStart) >= e.cancels.after {
			e.move(o, onRunLate)
			e.cancelIfWaiting(o)
			marked = true
		}
	}
	return marked
}

// cancelIfWaiting cancels an overdue delivery's context once its handler
// waits on the harness: a step held for its grant, or one the server
// says waits on a lock. Until then (its own code, a reply on its way) it
// is left to get there.
func (e *execution) cancelIfWaiting(o *deliveryRun) {
	if o.life != overdue || (len(o.pending) == 0 && !o.blocked()) {
		return
	}
	e.move(o, onCancel)
	o.cancelSeq = o.requested
	o.cancelledAt = time.Now()
	o.outcome.Fault = fmt.Sprintf("had its context cancelled %s %s after it started", e.cancels.by, e.cancels.after)
	o.cancel()
}

// cancelGrace is how long, in real time, a cancelled delivery has to
// return or ask for another step before the next delivery starts anyway:
// a handler that honours its context returns at once; one deaf to it,
// waiting on a step the harness holds, would otherwise never move.
const cancelGrace = 2 * time.Second

// cancelSettled reports whether every overdue delivery has reacted to
// its cancellation: returned, asked for another step (it ignores its
// context), or had cancelGrace to do either.
func (e *execution) cancelSettled() bool {
	for _, o := range e.deliveries {
		switch o.life {
		case overdue:
			return false
		case cancelled:
		default:
			continue
		}
		if o.requested > o.cancelSeq {
			continue
		}
		if time.Since(o.cancelledAt) >= cancelGrace {
			// It may have been about to react: the grace decided.
			e.raced(result.TimerFired, o, nil, 0) // races.go
			continue
		}
		return false
	}
	return true
}

// holdsForCancel reports whether a delivery waits for cancelled ones to
// react; steps wait with it.
func (e *execution) holdsForCancel() bool {
	for _, d := range e.deliveries {
		if d.life == held {
			return true
		}
	}
	return false
}

// cancelWake is when the loop must look again for a cancelled delivery
// whose grace runs out.
func (e *execution) cancelWake() (time.Duration, bool) {
	for _, o := range e.deliveries {
		if o.life == cancelled && o.requested == o.cancelSeq && time.Since(o.cancelledAt) < cancelGrace {
			return max(time.Until(o.cancelledAt.Add(cancelGrace)), time.Millisecond), true
		}
	}
	return 0, false
}
