package result

import "github.com/runtwice/twice/faults"

// Fate is what became of one step a delivery was granted, as the executor
// saw it happen: it is recorded where the fault strikes, not worked out
// afterwards from the schedule.
type Fate string

// Fates of a step. A step has one: a fault the schedule put on it comes
// first, then a held commit, then a lock wait.
const (
	// Ran: the step went as asked.
	Ran Fate = "ran"
	// WaitedOnLock: the statement ran, after waiting on a lock another
	// delivery held; the executor ran the other delivery meanwhile.
	WaitedOnLock Fate = "waited-on-lock"
	// CommitHeld: an autocommit statement ran with its commit held while
	// another delivery's next step ran (faults.Schedule.Holds).
	CommitHeld Fate = "commit-held"
	// CrashedBefore: the worker died just before the step reached the
	// server or the provider; it never ran.
	CrashedBefore Fate = "crashed-before"
	// ReplyLost: the server applied the statement, but its reply never
	// reached the delivery: the connection dropped and the handler's own
	// error path ran.
	ReplyLost Fate = "reply-lost"
	// CrashedAfter: the provider made the effect, and the worker died
	// before it heard back.
	CrashedAfter Fate = "crashed-after"
	// TimedOut: the provider made the effect, its answer was lost, and
	// the handler's call returned a timeout error while it lived on.
	TimedOut Fate = "timed-out"
	// Refused: the provider refused the effect call before making it (a
	// 503); the handler's call returned an error and it lived on.
	Refused Fate = "refused"
	// Unfinished: the step was granted and had not finished when the
	// delivery ended (it hung past harness.Config.DeliveryTimeout, or
	// died while another of its connections waited); what it did is
	// not among the delivery's effects.
	Unfinished Fate = "unfinished"
)

// Faulted reports whether the schedule's fault hit the step: every fate
// but Ran, WaitedOnLock, CommitHeld and Unfinished.
func (f Fate) Faulted() bool {
	switch f {
	case CrashedBefore, ReplyLost, CrashedAfter, TimedOut, Refused:
		return true
	}
	return false
}

// Completed reports whether the handler saw the step end: it got a reply
// or the call returned, whatever the answer. A step that crashed before
// it ran, whose reply was lost, after which the worker died, or that was
// still running at the delivery's end did not.
func (f Fate) Completed() bool {
	switch f {
	case Ran, WaitedOnLock, CommitHeld, TimedOut, Refused:
		return true
	}
	return false
}

// StepTaken is one step a delivery was granted, and its fate.
type StepTaken struct {
	// Step is the statement or effect call, as the delivery asked for
	// it: for a step whose reply was lost, CommitPoint says whether the
	// server wrote.
	faults.Step
	// Fate is what became of it.
	Fate Fate
}

// Faulted returns the step of o that the schedule's fault hit, or nil:
// a crash after the last step, a lost ack and a fault that found no
// step to act on hit none.
func (o *DeliveryOutcome) Faulted() *StepTaken {
	for i := range o.Steps {
		if o.Steps[i].Fate.Faulted() {
			return &o.Steps[i]
		}
	}
	return nil
}

// Completed returns the steps of o whose end the handler saw
// (Fate.Completed), in order.
func (o *DeliveryOutcome) Completed() []faults.Step {
	var out []faults.Step
	for _, s := range o.Steps {
		if s.Fate.Completed() {
			out = append(out, s.Step)
		}
	}
	return out
}

// Error is an error a result carries. It keeps the error itself in the
// Go result, and its message through the file a check writes for the
// twice runner.
type Error struct {
	// Message is the error's text.
	Message string
	err     error
}

// NewError wraps err, or returns nil for a nil err.
func NewError(err error) *Error {
	if err == nil {
		return nil
	}
	return &Error{Message: err.Error(), err: err}
}

// Error returns Message.
func (e *Error) Error() string { return e.Message }

// Unwrap returns the error NewError wrapped; nil in a result read back
// from a file.
func (e *Error) Unwrap() error { return e.err }
