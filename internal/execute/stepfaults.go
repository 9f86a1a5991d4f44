package execute

import (
	"fmt"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/text"
	"github.com/runtwice/twice/internal/wireproxy"
)

// stepFault is what a fault kind does to the step its delivery's schedule
// names (faults.Scheduled.At): to a statement and to an effect call. Each
// returns whether it answered the step's grant itself; when it did not,
// give grants the step as usual (with the reply the fault set, for an
// effect).
type stepFault struct {
	statement, effect func(e *execution, d *deliveryRun, req *stepRequest) (answered bool)
}

// stepFaults is one entry per fault kind that acts on a step. A crash
// before the ack and a lost ack act on the handler's return instead
// (execution.returned), and the clean run has no fault.
var stepFaults = map[faults.Kind]stepFault{
	faults.KindCrash:            {statement: crashBefore, effect: crashBefore},
	faults.KindAmbiguous:        {statement: loseReply, effect: notAStatement},
	faults.KindCrashAfterEffect: {statement: notAnEffect, effect: crashAfterEffect},
	faults.KindEffectLostReply: {statement: notAnEffect, effect: effectFault(effects.ReplyLost,
		"lost the answer to step %d, which the provider made; the call timed out: %s")},
	faults.KindEffectOutage: {statement: notAnEffect, effect: outage},
	faults.KindEffectSlow: {statement: notAnEffect, effect: effectFault(effects.AnsweredLate,
		"had the answer to step %d, which the provider made, come after the client's timeout: %s")},
	faults.KindEffectFailed: {statement: notAnEffect, effect: effectFault(effects.Refused,
		"had step %d refused by the provider before it was made (a transient refusal): %s")},
}

// atFault applies d's fault to req when the schedule puts it there, and
// reports whether the fault answered req's grant itself.
func (e *execution) atFault(d *deliveryRun, req *stepRequest) bool {
	f, ok := stepFaults[d.spec.Fault]
	if !ok || d.spec.At != req.seq {
		return false
	}
	if req.effect {
		return f.effect(e, d, req)
	}
	return f.statement(e, d, req)
}

// crashBefore: the worker dies before the step reaches the server or the
// provider.
func crashBefore(e *execution, d *deliveryRun, req *stepRequest) bool {
	d.midJobFault = true
	req.end = result.CrashedBefore
	req.grant <- wireproxy.Crash
	e.die(d, fmt.Sprintf("crashed before step %d reached the server: %s", req.seq, text.OneLine(req.step.SQL)))
	e.watchEnded(req)
	return true
}

// crashAfterEffect: the provider accepts the call and the worker dies
// before it hears back (execution.stepDone).
func crashAfterEffect(_ *execution, d *deliveryRun, req *stepRequest) bool {
	d.dieAfter = req
	d.midJobFault = true
	req.end = result.CrashedAfter
	return false
}

// loseReply: the server applies the statement, the reply is lost, the
// connection drops; the handler's own error path runs, it may connect
// again and retry, and its return value counts. Whether the step wrote
// is known once the server has answered (execution.stepDone).
func loseReply(_ *execution, d *deliveryRun, req *stepRequest) bool {
	d.midJobFault = true
	req.end = result.ReplyLost
	d.outcome.Fault = fmt.Sprintf("step %d was applied but its reply was lost: %s", req.seq, text.OneLine(req.step.SQL))
	d.lostReply = req
	d.bySQL[req.step.Index] = req
	req.grant <- wireproxy.Ambiguous
	return true
}

// effectFault: the delivery lives on; the call returns an error with
// reply, and the handler decides what to make of it. why takes the step's
// number and the call.
func effectFault(reply effects.Reply, why string) func(*execution, *deliveryRun, *stepRequest) bool {
	return func(_ *execution, d *deliveryRun, req *stepRequest) bool {
		d.midJobFault = true
		req.reply, req.end = reply, resultOf(reply)
		d.outcome.Fault = fmt.Sprintf(why, req.seq, text.OneLine(req.step.SQL))
		return false
	}
}

// outage: the answer to the call is lost, and so is every retry of it
// with its key (execution.give).
func outage(_ *execution, d *deliveryRun, req *stepRequest) bool {
	d.midJobFault = true
	req.reply, req.end = effects.ReplyLost, result.TimedOut
	d.outageKey = req.call.Key
	d.outcome.Fault = fmt.Sprintf("lost the answer to step %d, which the provider made, and to every retry of it with its key; the calls timed out: %s", req.seq, text.OneLine(req.step.SQL))
	return false
}

// resultOf is how a step whose effect call got reply ends, as a result
// records it.
func resultOf(reply effects.Reply) result.Fate {
	if reply == effects.Refused {
		return result.Refused
	}
	return result.TimedOut
}

// notAStatement and notAnEffect: another path than the clean run's,
// where the step the fault names is of the other kind; the step runs as
// it is and the delivery says why its fault did not happen.
func notAStatement(_ *execution, d *deliveryRun, req *stepRequest) bool {
	d.outcome.Fault = fmt.Sprintf("did not meet its %s fault: step %d is an effect call, not a statement: %s", d.spec.Fault, req.seq, text.OneLine(req.step.SQL))
	return false
}

func notAnEffect(_ *execution, d *deliveryRun, req *stepRequest) bool {
	d.outcome.Fault = fmt.Sprintf("did not meet its %s fault: step %d is a statement, not an effect call: %s", d.spec.Fault, req.seq, text.OneLine(req.step.SQL))
	return false
}
