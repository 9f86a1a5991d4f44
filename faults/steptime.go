package faults

import (
	"errors"
	"fmt"
	"regexp"
	"time"
)

// A StepTime says how long the steps it matches take on the harness clock
// (Plan.StepTimes): the job's SMTP call takes 2s, its call to the
// payments API 800ms, its report query 40s. The visibility-timeout fault
// reads them to learn where the first delivery is when the queue gives up
// on it (JetStream's AckWait or BackOff[0], SQS's visibility timeout,
// River's rescue): a job that has returned by then is never delivered
// twice at once, and one still running is paused at the step it is in.
//
// A step is matched by its effect kind, its text, or both: Effect "email"
// matches every email the job sends (through net/smtp or the Mailer);
// Match "api\.stripe\.com" every call to that host; Match "^UPDATE
// orders" those statements. The first StepTime that matches a step gives
// its time; a step none matches takes no time.
type StepTime struct {
	// Effect matches effect calls of this kind ("email", "payment",
	// "http", or a kind given to harness.Delivery.Effect); empty matches
	// any step.
	Effect string
	// Match is a regular expression (Go's regexp syntax) matched against
	// the step's text: a statement's SQL, or an effect call as a failure
	// prints it ("email to=asha@example.com subject=...", "POST
	// https://api.stripe.com/v1/charges ..."); empty matches any step.
	Match string
	// Takes is how long each step it matches takes; more than zero.
	Takes time.Duration
}

// Validate reports why t cannot time a step: no Effect and no Match, a
// Match that does not compile, or a Takes that is not positive.
func (t StepTime) Validate() error {
	var errs []error
	if t.Effect == "" && t.Match == "" {
		errs = append(errs, errors.New("neither Effect nor Match is set, so it would time every step alike; say which steps take the time (Effect: \"email\", Match: `api\\.stripe\\.com`)"))
	}
	if _, err := regexp.Compile(t.Match); err != nil {
		errs = append(errs, fmt.Errorf("field Match %q: %w", t.Match, err))
	}
	if t.Takes <= 0 {
		errs = append(errs, fmt.Errorf("field Takes is %s; want a positive duration", t.Takes))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("faults.StepTime{Effect: %q, Match: %q, Takes: %s}: %w", t.Effect, t.Match, t.Takes, err)
	}
	return nil
}

// Overlap is where the first delivery is, by the steps' declared times
// (Plan.StepTimes), when the queue gives up on it and hands the job out
// again: inside step In, which started at Took[In-1] after the delivery
// began. The visibility-timeout fault pauses the first delivery after
// In-1 steps (the step not yet made) and after In steps (made, its reply
// still on its way), and nowhere else. In is zero when the delivery has
// returned by then: there is no overlap, and the fault has no schedule.
type Overlap struct {
	// Timeout is the queue's visibility timeout (Plan.VisibilityTimeout).
	Timeout time.Duration
	// Took is how long the clean run's steps take in all.
	Took time.Duration
	// In is the step (1-based) the first delivery is in at Timeout; zero
	// when it has returned by then.
	In int
	// Started is when step In started, from the delivery's start.
	Started time.Duration `json:",omitempty"`
}

// Overlap computes where the first delivery is when the queue gives up on
// it, from p.StepTimes; nil when p has none (the job's timing is not
// known, so it may be anywhere: every step is a pause point). It
// assumes each StepTime is valid (StepTime.Validate).
func (p Plan) Overlap() *Overlap {
	if len(p.StepTimes) == 0 {
		return nil
	}
	res := make([]*regexp.Regexp, len(p.StepTimes))
	for i, t := range p.StepTimes {
		res[i], _ = regexp.Compile(t.Match) // Validate compiled it
	}
	o := &Overlap{Timeout: p.visibility()}
	for i, s := range p.Steps {
		start := o.Took
		for j, t := range p.StepTimes {
			if (t.Effect == "" || t.Effect == s.Effect) && (res[j] == nil || res[j].MatchString(s.SQL)) {
				o.Took += t.Takes
				break
			}
		}
		if o.In == 0 && o.Took > o.Timeout {
			o.In, o.Started = i+1, start
		}
	}
	return o
}

// pauses are the pause points of VisibilityTimeout that o allows: after
// In-1 and In steps (after one at least); none when the delivery has
// returned by the timeout.
func (o *Overlap) pauses() []int {
	switch o.In {
	case 0:
		return nil
	case 1:
		return []int{1}
	}
	return []int{o.In - 1, o.In}
}
