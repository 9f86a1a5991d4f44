package faults

import (
	"slices"

	"pgregory.net/rapid"
)

// Limits bounds the schedules Generate draws. The zero value is the
// default.
type Limits struct {
	// Deliveries is the most deliveries a schedule holds, before the
	// queue's own retry of a job left failed; zero means 4.
	Deliveries int
	// Jobs is how many job IDs the deliveries may carry: 1 is the job, 2
	// and up are producer copies; zero means 2.
	Jobs int
}

func (l Limits) deliveries() int {
	if l.Deliveries > 0 {
		return l.Deliveries
	}
	return 4
}

func (l Limits) jobs() int {
	if l.Jobs > 0 {
		return l.Jobs
	}
	return 2
}

// maxOrder bounds the length of a drawn interleaving order.
const maxOrder = 64

// Generate returns a rapid generator of schedules for a job whose clean
// run took p.Steps. It draws from the whole fault space: 1 to
// l.Deliveries deliveries, each carrying the job or a producer copy, with
// attempts numbered per job; workers are new unless a lost ack left one
// alive; each delivery may crash before any step or before its ack, lose
// the reply of a commit point (or die right after an effect), lose its
// ack, or meet a provider that makes an effect call and loses its answer,
// or refuses the call, while the delivery goes on; a delivery may start
// while the previous one runs, their steps granted in a drawn order; the
// clock may move by the visibility timeout or the redrive window before a
// delivery starts. A redelivery after a fault comes at least a
// visibility timeout later, as a queue makes it.
//
// Every value is drawn so that rapid's shrinking heads toward a smaller
// schedule: fewer deliveries, the original job ID, new workers, no
// overlap, no clock move, no fault, and the earliest steps. Every
// schedule it draws passes Validate.
func Generate(p Plan, l Limits) *rapid.Generator[Schedule] {
	return rapid.Custom(func(t *rapid.T) Schedule { return draw(t, p, l) })
}

// faultChoices are the faults a delivery can draw, the simplest first:
// rapid shrinks a choice toward the first. Those that need a commit point
// or an effect call come last, so a plan without them cuts the list.
// KindAmbiguous stands for a lost reply at a commit point or an effect
// call: at an effect call it is drawn as KindCrashAfterEffect, so the
// draws read the same either way.
var faultChoices = []Kind{KindNone, KindCrash, KindLostAck, KindAmbiguous, KindEffectLostReply, KindEffectFailed}

// choices are one delivery's draws. Every delivery draws all of them, in
// the same ranges whatever came before, so that rapid can lower one
// value or drop a whole delivery without changing how the rest of the
// draws read; draw turns them into a valid delivery.
type choices struct {
	job, worker, after, clock, fault, crashAt, ambiguousAt, effectAt int
	overlap                                                          bool
}

func draw(t *rapid.T, p Plan, l Limits) Schedule {
	steps := len(p.Steps)
	var ambiguous []int // steps whose reply can be lost: commit points and effects
	var effects []int   // effect calls
	for i, s := range p.Steps {
		if s.CommitPoint || s.IsEffect() {
			ambiguous = append(ambiguous, i+1)
		}
		if s.IsEffect() {
			effects = append(effects, i+1)
		}
	}
	kinds := faultChoices
	switch {
	case len(ambiguous) == 0:
		kinds = kinds[:3]
	case len(effects) == 0:
		kinds = kinds[:4]
	}
	one := rapid.Custom(func(t *rapid.T) choices {
		c := choices{
			job:     rapid.IntRange(1, l.jobs()).Draw(t, "job"),
			worker:  rapid.IntRange(0, l.deliveries()).Draw(t, "worker"),
			overlap: rapid.Bool().Draw(t, "overlap"),
			after:   rapid.IntRange(0, steps).Draw(t, "after"),
			clock:   rapid.IntRange(0, 2).Draw(t, "clock"),
			fault:   rapid.IntRange(0, len(kinds)-1).Draw(t, "fault"),
			crashAt: rapid.IntRange(1, steps+1).Draw(t, "crash at"),
		}
		if len(ambiguous) > 0 {
			c.ambiguousAt = rapid.IntRange(0, len(ambiguous)-1).Draw(t, "ambiguous at")
		}
		if len(effects) > 0 {
			c.effectAt = rapid.IntRange(0, len(effects)-1).Draw(t, "effect at")
		}
		return c
	})
	drawn := rapid.SliceOfN(one, 1, l.deliveries()).Draw(t, "deliveries")

	var s Schedule
	attempts := map[int]int{}   // deliveries so far per job
	lastFault := map[int]Kind{} // the latest delivery's fault per job
	var alive []int             // workers a lost ack left running
	jobs, workers := 0, 0
	for i, c := range drawn {
		d := Scheduled{Job: 1}
		if i > 0 {
			d.Job = min(c.job, jobs+1)
		}
		jobs = max(jobs, d.Job)
		attempts[d.Job]++
		d.Attempt = attempts[d.Job]

		d.Worker = workers + 1
		if c.worker > 0 && len(alive) > 0 {
			d.Worker = alive[min(c.worker, len(alive))-1]
		}
		workers = max(workers, d.Worker)

		if i > 0 {
			if c.overlap {
				d.With = i // the previous delivery, 1-based
				d.After = c.after
			}
			// A job whose last delivery did not ack comes back only once
			// the visibility timeout has passed.
			clock := c.clock
			if k, seen := lastFault[d.Job]; seen && k != KindNone && d.With == 0 {
				clock = max(clock, 1)
			}
			switch clock {
			case 1:
				d.Advance = p.visibility()
			case 2:
				d.Advance = p.redriveAfter()
			}
		}

		d.Fault = kinds[c.fault]
		switch d.Fault {
		case KindCrash:
			if c.crashAt <= steps { // steps+1: after the last step, before the ack
				d.At = c.crashAt
			}
			alive = slices.DeleteFunc(alive, func(w int) bool { return w == d.Worker })
		case KindAmbiguous:
			d.At = ambiguous[c.ambiguousAt]
			if p.Steps[d.At-1].IsEffect() {
				// The provider makes it and the worker dies before it
				// hears back.
				d.Fault = KindCrashAfterEffect
				alive = slices.DeleteFunc(alive, func(w int) bool { return w == d.Worker })
			}
		case KindEffectLostReply, KindEffectFailed:
			d.At = effects[c.effectAt]
		case KindLostAck:
			if !slices.Contains(alive, d.Worker) {
				alive = append(alive, d.Worker)
			}
		}
		lastFault[d.Job] = d.Fault
		s.Deliveries = append(s.Deliveries, d)
	}
	if s.overlaps() && steps > 0 {
		// A full-length order keeps the interleaving exact: past the
		// order the executor grants whichever delivery asks first.
		n := len(s.Deliveries)
		size := min(steps*n, maxOrder)
		s.Order = rapid.SliceOfN(rapid.IntRange(1, n), size, size).Draw(t, "order")
		// At most one held commit: it shrinks away unless the race
		// inside one statement is what fails.
		s.Holds = rapid.SliceOfN(rapid.IntRange(1, size), 0, 1).Draw(t, "held")
	}
	return s
}

func (s Schedule) overlaps() bool {
	for _, d := range s.Deliveries {
		if d.With > 0 {
			return true
		}
	}
	return false
}
