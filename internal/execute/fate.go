package execute

import "github.com/runtwice/twice/harness/result"

// The executor records each step's fate where it happens: give sets the
// fate of a step the schedule's fault hits, held a held commit's, and a
// step that ends as asked is finished. What is left unset when the
// scenario is over was still running when its delivery ended.

// finished records that req ended as the handler saw it: it ran, unless
// a fault or a held commit already said otherwise.
func (r *stepRequest) finished() {
	if r.end == "" {
		r.end = result.Ran
	}
}

// fateOf is req's fate once its scenario is over.
func fateOf(req *stepRequest) result.Fate {
	switch {
	case req.end == "":
		return result.Unfinished
	case req.end == result.Ran && req.waited:
		return result.WaitedOnLock
	}
	return req.end
}

// recorded is what d did, as its scenario's result holds it.
func (d *deliveryRun) recorded() result.DeliveryOutcome {
	out := d.outcome
	out.Steps, out.Died = d.stepsTaken(), d.life == dead
	return out
}

// stepsTaken are the steps d was granted, in order, with their fates:
// DeliveryOutcome.Steps.
func (d *deliveryRun) stepsTaken() []result.StepTaken {
	var out []result.StepTaken
	for _, req := range d.taken {
		out = append(out, result.StepTaken{Step: req.asStep(), Fate: fateOf(req)})
	}
	return out
}
