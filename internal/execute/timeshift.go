package execute

import (
	"time"

	"github.com/runtwice/twice/faults"
)

// jobStart is how far the clock had moved when the job effectively
// started: at the start of the first delivery that left a trace (a commit
// or an effect). Deliveries before it died without one, so as far as the
// database and the providers can tell the job ran only from then on, and
// a clean run at that time is what the scenario must match.
//
// The clock moves a delivery made to its job's due time (Waited) count
// only for the deliveries before it: a clean run started that late waits
// for the due time itself, if it is still ahead.
func (e *execution) jobStart() time.Duration {
	var moved time.Duration
	for _, d := range e.deliveries {
		moved += d.spec.Advance
		if d.durable {
			return moved
		}
		moved += d.outcome.Waited
	}
	return 0
}

// sinceStart says t as the clock's move from the execution's start:
// "+10s".
func (e *execution) sinceStart(t time.Time) string {
	if t.Before(e.began) {
		return "-" + faults.FormatDuration(e.began.Sub(t))
	}
	return "+" + faults.FormatDuration(t.Sub(e.began))
}
