package harness

import (
	"errors"
	"fmt"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/internal/blame"
)

// errGoexit is what a handler's goroutine reports when it ended without
// returning: runtime.Goexit, which t.Fatal, t.FailNow, t.Skip and
// require's failing assertions call. A recover sees nothing of it, and
// the goroutine's caller never gets a return value, so without this the
// delivery waited for its DeliveryTimeout.
var errGoexit = errors.New("the handler's goroutine exited without returning")

// goexit ends the check when d's handler exited its goroutine: the test's
// own assertion failed inside the delivery, and the test stops there as
// it would outside twice. It is the user's error, named with the
// delivery and where it was, not a finding and not twice's breakage.
func (e *execution) goexit(d *deliveryRun) {
	err := blame.User(fmt.Errorf("[twice] job %q: the handler called t.Fatal, t.FailNow, t.Skip or a failing require assertion (runtime.Goexit) in delivery %s (attempt %d) of schedule %s, instead of returning; %s. Return an error from the handler instead: the queue sees that, and twice compares it",
		e.r.job.Name, d.spec.Label(), d.spec.Attempt, scheduleName(e.sched), d.where()))
	e.die(d, "")
	d.outcome.Err = errGoexit.Error()
	if e.failure == nil {
		e.failure = err
	}
}

// scheduleName is the schedule as messages name it: its fault and text,
// or "the clean run".
func scheduleName(s faults.Schedule) string {
	if s.Fault == "" {
		return s.String() + " (a clean run)"
	}
	return fmt.Sprintf("%s (%s)", s, s.Fault)
}
