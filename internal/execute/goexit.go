package execute

import (
	"errors"
	"fmt"
	"time"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/render"
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
	err := blame.User(fmt.Errorf("job %q: the handler called t.Fatal, t.FailNow, t.Skip or a failing require assertion (runtime.Goexit) in delivery %s (attempt %d) of schedule %s, instead of returning; %s. Return an error from the handler instead: the queue sees that, and twice compares it",
		e.r.job.Name, d.spec.Label(), d.spec.Attempt, render.ScheduleName(e.sched), d.where()))
	e.die(d, "")
	d.outcome.Err = errGoexit.Error()
	if e.failure == nil {
		e.failure = err
	}
}

// checkDeaf follows a delivery abandoned at its DeliveryTimeout: its
// context is cancelled by then, and a handler that honours it returns at
// once. One that does not within abandonGrace is deaf to its context and
// hangs every scenario that reaches it for the whole DeliveryTimeout (a
// default matrix took minutes), so the check stops here with the user's
// error, naming the delivery and where it hung, instead of waiting out
// the same hang scenario after scenario. why is the delivery's error.
func (e *execution) checkDeaf(d *deliveryRun, why string) {
	if d.returned == nil || e.failure != nil {
		return
	}
	grace := time.NewTimer(abandonGrace)
	defer grace.Stop()
	select {
	case <-d.returned:
		return
	case <-grace.C:
	}
	e.failure = blame.User(fmt.Errorf("job %q: delivery %s (attempt %d) of schedule %s hung: %s, and it went on after its context was cancelled. A handler deaf to its context hangs every scenario that reaches it, so the check stops here; make it return when ctx is done (pass ctx to every call that waits), or raise Config.DeliveryTimeout if it is only slow",
		e.r.job.Name, d.spec.Label(), d.spec.Attempt, render.ScheduleName(e.sched), why))
}
