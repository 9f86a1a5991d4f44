package execute

import (
	"time"

	"github.com/runtwice/twice/faults"
)

// jobStart is how far the clock had moved when the job effectively
// started: when the first delivery that left a trace (a commit or an
// effect) started its handler, after any move to its job's due time
// (Waited). Deliveries before it died without one, so as far as the
// database and the providers can tell the job ran only from then on, and
// a clean run doing its work at that time is what the scenario must
// match; the harness starts that clean run earlier by as much as its own
// clean run waited for the job to be due (a job scheduled for +10s).
func (e *execution) jobStart() time.Duration {
	var moved time.Duration
	for _, d := range e.deliveries {
		moved += d.spec.Advance + d.outcome.Waited
		if d.durable {
			return moved
		}
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
