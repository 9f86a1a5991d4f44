package execute

import (
	"errors"
	"fmt"
	"strings"

	"github.com/runtwice/twice/internal/render"
	"github.com/runtwice/twice/internal/text"
)

// errPanicked marks the error of a handler that panicked (callHandler).
var errPanicked = errors.New("handler panicked")

// panicked is the error of a handler that panicked: the value and the
// stack from the panic's site.
type panicked struct{ value, stack string }

func (p *panicked) Error() string { return fmt.Sprintf("%s: %s\n%s", errPanicked, p.value, p.stack) }
func (p *panicked) Unwrap() error { return errPanicked }

// fromPanic is a goroutine's stack, as debug.Stack gives it in a deferred
// recover, from the frame that panicked to the handler's own outermost
// frame: the frames of the recover and the panic above, and of the
// harness that called the handler below, are twice's, not the job's.
func fromPanic(stack string) string {
	lines := strings.Split(strings.TrimRight(stack, "\n"), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "panic(") && i+2 < len(lines) {
			lines = lines[i+2:]
			break
		}
	}
	for i, l := range lines {
		if strings.HasPrefix(l, "github.com/runtwice/twice/harness.") || strings.HasPrefix(l, "github.com/runtwice/twice/internal/execute.") {
			return strings.Join(lines[:i], "\n")
		}
	}
	return strings.Join(lines, "\n")
}

// settle ends the scenario at d, whose handler panicked: the panic is a
// finding whatever the rest does, so nothing more is waited for. The
// queue makes no retry (one that succeeded used to pass the scenario in
// silence, the panic named only in the delivery's error), deliveries not
// yet handed out are not, and running ones die as at a crash: their
// backends terminated on the server, their later steps refused. Deliveries
// whose Ack or Nack runs finish it, as the queue needs.
func (e *execution) settle(d *deliveryRun) {
	if e.settled != nil {
		return
	}
	e.settled = d
	e.retries = 0
	why := fmt.Sprintf("stopped by the scenario: delivery %s panicked, which settles its outcome", d.spec.Label())
	for _, o := range e.deliveries {
		if o.life == waiting {
			e.move(o, onRefuse)
			o.outcome.NotDelivered = "not handed out: delivery " + d.spec.Label() + " panicked before, which settles the scenario's outcome"
		}
	}
	e.dieLive(why, d)
}

// settledProblem is Output.Incomplete once a panic settled the
// scenario: the panic's line first, then the other jobs' lines without
// the settled job's own (its last delivery is the one that panicked, or
// one stopped for it).
func (e *execution) settledProblem(us []unfinished) []string {
	d := e.settled
	if d == nil {
		return lines(us)
	}
	out := []unfinished{{d.outcome.JobID, fmt.Sprintf("delivery %s (attempt %d) of schedule %s panicked, so the scenario stopped there: a handler that panics is a finding whatever its other deliveries and the queue's retries do: %s",
		d.spec.Label(), d.outcome.Attempt, render.ScheduleName(e.sched), text.FirstLine(d.outcome.Err))}}
	for _, u := range us {
		if u.job != d.outcome.JobID {
			out = append(out, u)
		}
	}
	return lines(out)
}

// dieLive kills every delivery that runs, but except, as a crash does,
// for why: its backends are terminated on the server (bury).
func (e *execution) dieLive(why string, except *deliveryRun) {
	for _, o := range e.deliveries {
		if o != except && o.life.acting() {
			e.die(o, why)
		}
	}
}
