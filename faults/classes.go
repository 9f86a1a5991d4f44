package faults

import "strings"

// Crash classes: crash points that end in the same state.
//
// A crash just before step k leaves durable what steps 1..k-1 made
// durable: their commit points (Step.CommitPoint) and their effect calls.
// Two crash points k < k' therefore leave the same state when steps
// k..k'-1 are statements that are not commit points: statements inside a
// transaction the crash rolls back (the worker dies, its connections
// close, their transactions and session locks end), or reads outside
// one. The redelivery that follows starts on the same state, at the same
// clock, with the same attempt number, and so runs as it would after
// any of them. One crash point of each such class is enough, for
// CrashAtEveryStep and for Redrive alike (a redrive is a crash followed
// by a late redelivery).
//
// The one thing such a statement can leave behind is a sequence value it
// drew (nextval does not roll back). The representative of a class is
// its last crash point, the one that ran every statement of the class,
// so it draws at least as many values as any other member: a gap the
// state comparison reports (a sequence drawn into text, SequenceColumns)
// shows there if it shows at any member; serial columns are compared by
// rank, so the others' smaller gaps compare alike.
//
// An effect call and a commit point end a class: a crash after one
// leaves it done, a crash before it does not. So does a delivery's end:
// the crash after the last step (before the ack) is a class of its own.
//
// The other faults that act at a step are not merged: an ambiguous
// commit acts on commit points only, the effect faults on effect calls
// only, and visibility-timeout runs a second delivery while the first
// holds the locks and snapshot it has taken after k steps, which differ
// from one k to the next (a check-then-act inside a transaction is found
// only between its check and its act).
//
// The classes come from the clean run's steps. The harness checks the
// representative's first delivery, which took every step of its class:
// when a step of the class is not the clean run's statement (another
// text, an effect call, a commit point), it runs the crash points left
// out as well.

// CrashClass is a run of crash points From..To (1-based, as Scheduled.At)
// that end in the same state: steps From..To-1 are statements of the
// clean run that make nothing durable. Its representative crashes just
// before step To; the others are left out.
type CrashClass struct {
	// From and To are the first and last crash point of the class.
	From, To int
	// Run is the representative's schedule (a crash at To), one of
	// Expansion.Run.
	Run Schedule
}

// Members is how many crash points the class stands for.
func (c CrashClass) Members() int { return c.To - c.From + 1 }

// crashClasses splits crash points 1..n (n steps) into classes of
// equivalent ones, as [from, to] pairs in order.
func crashClasses(steps []Step) [][2]int {
	var out [][2]int
	for k := 1; k <= len(steps); k++ {
		// Crash points k-1 and k differ by step k-1.
		if k > 1 && durableNothing(steps[k-2]) {
			out[len(out)-1][1] = k
			continue
		}
		out = append(out, [2]int{k, k})
	}
	return out
}

// durableNothing reports whether a crash right after s leaves the same
// state as one right before it: s is a statement and not a commit point.
func durableNothing(s Step) bool { return !s.IsEffect() && !s.CommitPoint && !s.Autocommit }

// crashPoints expands a fault that crashes at every step with build
// making the schedule of a crash before step k: one crash point per class
// runs, the others are left out (Expansion.Pruned), unless p.Unreduced.
func crashPoints(p Plan, build func(k int) Schedule) Expansion {
	var e Expansion
	for _, c := range crashClasses(p.Steps) {
		if p.Unreduced || c[0] == c[1] {
			for k := c[0]; k <= c[1]; k++ {
				e.Run = append(e.Run, build(k))
			}
			continue
		}
		rep := build(c[1])
		e.Run = append(e.Run, rep)
		e.Classes = append(e.Classes, CrashClass{From: c[0], To: c[1], Run: rep})
		for k := c[0]; k < c[1]; k++ {
			e.Pruned = append(e.Pruned, build(k))
		}
	}
	return e
}

// Differs returns the first step, 1-based, of the class's representative
// whose first delivery took steps took where the class assumed the clean
// run's steps clean: a step From..To-1 of another text, an effect call or
// a commit point, or no step To (the crash never came). Zero when it
// took what the class assumed.
func (c CrashClass) Differs(clean, took []Step) int {
	for k := c.From; k <= c.To; k++ {
		switch {
		case k > len(took):
			return k
		case k == c.To:
		case k > len(clean) || took[k-1].SQL != clean[k-1].SQL || !durableNothing(took[k-1]):
			return k
		}
	}
	return 0
}

// Pause classes: visibility-timeout pause points that end alike when the
// second delivery waits on the first one's locks.
//
// VisibilityTimeout pauses the first delivery after k steps while a
// second one runs. Inside one transaction the pause points are not
// equivalent in general: the first delivery holds other locks and has
// read other rows after k steps than after k+1 (a check-then-act is
// found only between its check and its act). One case is: when, paused
// after k steps, the first delivery already holds a lock the second
// one's first statement that is not local waits on. Then the first
// delivery runs the rest of its steps alone and commits, and only then
// does the second one go on. Paused after k' > k steps instead, with
// steps k+1..k' statements of the same transaction that make nothing
// durable and release no lock (no ROLLBACK, ROLLBACK TO SAVEPOINT or
// advisory unlock: PostgreSQL holds every other lock to the end of the
// transaction), it still holds that lock, its steps k+1..k' saw
// nothing of the second delivery (which had committed nothing), so the
// second delivery's statement waits again, at the latest where it
// waited before, the first delivery runs its remaining steps as it did,
// and the second goes on from the same committed state. So a pause
// class is run from its first point, and the harness keeps the
// reduction only when that scenario shows the pattern: the second
// delivery's first steps (statements that are not commit points) then
// one that waited, the first delivery's remaining steps granted next,
// one lock wait in all; otherwise it runs the pause points left out.

// PauseClass is a run of visibility-timeout pause points From..To (After
// of the second delivery) where steps From+1..To of the clean run are
// statements that make nothing durable and release no lock. Its
// representative pauses after From steps; the others are left out, and
// run unless the representative's second delivery waited on the first
// one's locks at its first step that is not local (see
// PauseClass.Waited).
type PauseClass struct {
	From, To int
	Run      Schedule
}

// keepsLocks reports whether a pause right after s is equivalent, as a
// pause class assumes, to one right before it: s makes nothing durable
// and releases no lock.
func keepsLocks(s Step) bool {
	if !durableNothing(s) {
		return false
	}
	q := strings.ToUpper(strings.TrimSpace(s.SQL))
	return !strings.HasPrefix(q, "ROLLBACK") && !strings.HasPrefix(q, "ABORT") &&
		!strings.Contains(q, "ADVISORY_UNLOCK") && !strings.Contains(q, "PREPARE TRANSACTION")
}

// pausePoints expands VisibilityTimeout: one pause point of each class
// runs (its first), the others are left out, unless p.Unreduced. A class
// starts after a statement that is not local and keeps its locks, and
// goes on while the next step keeps them too.
func pausePoints(p Plan, build func(k int) Schedule) Expansion {
	var e Expansion
	n := len(p.Steps)
	for k := 1; k <= n; k++ {
		// A class starts after a statement that may have taken a lock
		// (not a local step, which takes none: the second delivery would
		// not wait there).
		to := k
		for !p.Unreduced && !p.QueueStatements && keepsLocks(p.Steps[k-1]) && !p.Steps[k-1].Local && to < n && keepsLocks(p.Steps[to]) {
			to++
		}
		rep := build(k)
		e.Run = append(e.Run, rep)
		if to > k {
			e.Pauses = append(e.Pauses, PauseClass{From: k, To: to, Run: rep})
			for j := k + 1; j <= to; j++ {
				e.Pruned = append(e.Pruned, build(j))
			}
		}
		k = to
	}
	return e
}

// Waited reports whether the representative of the class, run with
// granted order order, lock waits waits and its deliveries having asked
// for steps asked (the clean run's steps clean, n of them), kept the
// class: its first delivery took the clean run's steps From+1..To, and
// its second took j >= 1 steps, the first j-1 statements that are not
// commit points, the j-th waited on a lock (the second had steps left,
// yet the first was granted its next one), and the first delivery was
// granted every remaining step before the second's next one, with one
// lock wait in all.
func (c PauseClass) Waited(clean []Step, asked [2][]Step, order []int, waits int) bool {
	if waits != 1 {
		return false
	}
	for k := c.From + 1; k <= c.To; k++ {
		if k > len(asked[0]) || k > len(clean) || asked[0][k-1].SQL != clean[k-1].SQL || !keepsLocks(asked[0][k-1]) {
			return false
		}
	}
	n := len(asked[0])
	if len(order) < n || c.From >= n {
		return false
	}
	t := 0
	for ; t < c.From; t++ {
		if order[t] != 1 {
			return false
		}
	}
	j := 0
	for ; t < len(order) && order[t] == 2; t++ {
		j++
	}
	// The order gives the second delivery every step before the first
	// one's next, so the first one was granted one only while the second
	// waited, or once it had ended: it must have steps left.
	if j < 1 || j >= len(asked[1]) {
		return false
	}
	for _, s := range asked[1][:j-1] {
		if !durableNothing(s) {
			return false
		}
	}
	for rest := c.From; rest < n; rest++ {
		if t >= len(order) || order[t] != 1 {
			return false
		}
		t++
	}
	return true
}
