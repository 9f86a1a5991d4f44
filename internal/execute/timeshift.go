package execute

import "time"

// jobStart is how far the clock had moved when the job effectively
// started: at the start of the first delivery that left a trace (a commit
// or an effect). Deliveries before it died without one, so as far as the
// database and the providers can tell the job ran only from then on, and
// a clean run at that time is what the scenario must match.
func (e *execution) jobStart() time.Duration {
	var moved time.Duration
	for _, d := range e.deliveries {
		moved += d.spec.Advance
		if d.durable {
			return moved
		}
	}
	return 0
}
