package execute

import (
	"slices"
	"strings"
	"time"

	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/sqllex"
)

// Races. The executor decides most of a scenario: which step goes next,
// when a delivery starts, what a fault does. Where it cannot, it takes
// what came first, and that is timing: a step granted while another
// delivery's statement waits on a lock another session may let go of,
// or runs with its reply lost (the server picks which goes on first;
// see grantedBeside for a wait on the granted delivery's own lock),
// a wall-clock limit that ran out
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
// whose step is still in flight beside it: one that runs may end before
// or after req, as the server lets it, and one applied with its reply
// lost may still run. A held statement has run and waits for its
// commit, which the executor lets through itself: no race. Nor is a step
// that waits on d alone (waitsOnlyOn): it cannot go on before req ends,
// unless req comes to wait on a lock too, and then the server's deadlock
// check, a timer, picks which of the two fails (noteWait). Once req has
// let go of the lock, the step is seen running before the next grant
// (waitEnded), which then waits for it as for any running step.
func (e *execution) grantedBeside(d *deliveryRun, req *stepRequest) {
	for _, o := range e.deliveries {
		if o == d || o.life.over() {
			continue
		}
		beside, behind := o.lostReply != nil, false
		for _, f := range o.inflight {
			switch {
			case f.held:
			case f.blocked && e.waitsOnlyOn(f, d, req):
				behind = true
			default:
				beside = true
			}
		}
		switch {
		case beside:
			e.raced(result.StepBeside, d, o, req.seq)
		case behind:
			req.behind = append(req.behind, o)
		}
	}
	if q := e.queue; q != nil && q.running != nil && q.blocked {
		// The queue's operation for q.running.d waits on a lock.
		e.raced(result.StepBeside, d, q.running.d, req.seq)
	}
}

// waitsOnlyOn reports whether f, a step the server said waits on a lock,
// waits on d's backends alone, so that req, granted to d now, ends before
// f goes on: d has no other step out that could end and let go of a
// lock, and req lets go of one, if at all, only as its last act
// (releasesLast). What the server said holds until something may have
// let go of a lock (execution.releases), which waitEnded asks again
// about before any grant.
func (e *execution) waitsOnlyOn(f *inflightStep, d *deliveryRun, req *stepRequest) bool {
	if d.lostReply != nil || f.byAt != e.releases || len(f.by) == 0 {
		return false // a lost reply may still run, and end its transaction
	}
	for _, g := range d.inflight {
		if !g.held {
			return false
		}
	}
	if may, last := e.releaseOf(req); may && !last {
		return false
	}
	for _, pid := range f.by {
		if !e.world.owns(d, pid) {
			return false
		}
	}
	return true
}

// waitEnded asks the server again about each step seen waiting on a lock
// since something may have let go of one (a COMMIT or ROLLBACK, a
// delivery's end, a held commit let through, the queue's operation), and
// takes one no longer waiting for running again: the caller grants
// nothing beside it, as beside any running step. It reports whether one
// runs again. When the server cannot be asked, the step stays blocked
// and its wait old (a grant beside it is a race); the next lock poll
// reports the error.
func (e *execution) waitEnded() bool {
	again := false
	for _, d := range e.deliveries {
		for _, f := range d.inflight {
			if !f.blocked || f.held || f.byAt == e.releases {
				continue
			}
			by, err := e.world.blockedBy(e.ctx, f.req.step.PID)
			if err != nil {
				continue
			}
			f.by, f.byAt = by, e.releases
			if len(by) == 0 {
				f.blocked, f.asks, f.nextAsk = false, 0, time.Now().Add(stepPoll(0))
				again = true
			}
		}
	}
	return again
}

// noteWait records, once req is seen waiting on a lock, the race its
// grant left open: each delivery whose step waited on req's own (see
// grantedBeside) may now be the one the server's deadlock check fails.
func (e *execution) noteWait(req *stepRequest) {
	for _, o := range req.behind {
		if !o.life.over() {
			e.raced(result.StepBeside, req.d, o, req.seq)
		}
	}
	req.behind = nil
}

// releaseOf is mayRelease and releasesLast of req's statement; false for
// an effect call. Each text is lexed once in a scenario: its deliveries
// send the same few texts again and again, and every step asks.
func (e *execution) releaseOf(req *stepRequest) (may, last bool) {
	if req.effect {
		return false, false
	}
	r, ok := e.releaseBySQL[req.step.SQL]
	if !ok {
		r.may = mayRelease(req.step.SQL)
		r.last = r.may && releasesLast(req.step.SQL)
		if e.releaseBySQL == nil {
			e.releaseBySQL = map[string]release{}
		}
		e.releaseBySQL[req.step.SQL] = r
	}
	return r.may, r.last
}

// release is what a statement may do to the locks its session holds.
type release struct{ may, last bool }

// mayRelease reports whether sql may let go of a lock its session holds:
// a statement that ends a transaction or rolls back to a savepoint
// (COMMIT, END, ROLLBACK, ABORT, PREPARE TRANSACTION), resets the session
// (DISCARD), may commit inside (CALL of a procedure, DO), or a word
// naming an unlock or another backend's end (pg_advisory_unlock,
// pg_terminate_backend, pg_cancel_backend). A function of the user's
// that unlocks inside is not seen.
func mayRelease(sql string) bool {
	for _, words := range statements(sql) {
		if len(words) > 0 && releasing[words[0]] {
			return true
		}
		for _, w := range words {
			if strings.Contains(w, "UNLOCK") || strings.HasSuffix(w, "_BACKEND") {
				return true
			}
		}
	}
	return false
}

// releasesLast reports whether sql is one statement that ends its
// transaction or session state and does nothing after: COMMIT, END,
// ROLLBACK (to a savepoint too), ABORT, DISCARD. A lock it lets go of
// goes to a waiting session before its reply comes (PostgreSQL grants a
// released lock to its waiters as it releases it), so by the next
// grant the server says the waiter runs.
func releasesLast(sql string) bool {
	stmts := statements(sql)
	return len(stmts) == 1 && len(stmts[0]) > 0 && endsTx[stmts[0][0]]
}

// statements splits sql into its statements' words, upper case, leaving
// out strings, quoted names, comments and empty statements.
func statements(sql string) [][]string {
	var out [][]string
	var cur []string
	for t := range sqllex.Tokens(sql) {
		switch t.Kind {
		case sqllex.Semicolon:
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
		case sqllex.Word:
			cur = append(cur, strings.ToUpper(t.Text))
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// releasing are the leading keywords of the statements that may release
// a lock (see mayRelease); endsTx those of releasesLast.
var (
	releasing = map[string]bool{"COMMIT": true, "END": true, "ROLLBACK": true, "ABORT": true,
		"PREPARE": true, "DISCARD": true, "CALL": true, "DO": true}
	endsTx = map[string]bool{"COMMIT": true, "END": true, "ROLLBACK": true, "ABORT": true, "DISCARD": true}
)

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
