package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
)

// effectSteps makes effect calls steps of a delivery, like statements.
type effectSteps interface {
	// beginEffect blocks until the scheduler grants the call, and says what
	// the provider does with it. An error means the delivery is dead: the
	// call must not happen and is not recorded.
	beginEffect(ctx context.Context, call faults.Step) (effectFate, error)
	// endEffect reports that the provider accepted the call; the scheduler may
	// kill the delivery right here ("crash after an effect"). It is called
	// once after every granted beginEffect, also when the call failed or
	// panicked, after the call is in the log.
	endEffect(label string)
}

// effectFate is what the provider does with a granted effect call.
type effectFate int

const (
	// effectAnswered: the provider handles the call and the handler hears
	// its answer.
	effectAnswered effectFate = iota
	// effectReplyLost: the provider handles the call, but its answer is
	// lost; the handler's call times out (faults.KindEffectLostReply).
	effectReplyLost
	// effectRefused: the provider refuses the call before handling it, a
	// 503 (faults.KindEffectFailed).
	effectRefused
)

// EffectError is what an effect call returns when the schedule puts an
// effect fault on it: the provider made the effect and its answer was lost
// (faults.KindEffectLostReply; Applied is true, Timeout reports true, and
// errors.Is(err, context.DeadlineExceeded) holds, as for an HTTP client's
// timeout), or the provider refused the call before making it
// (faults.KindEffectFailed; a 503, Applied is false). Both are transient:
// a retry with the same idempotency key gets the stored answer of an
// applied payment, or makes a refused one. The handler goes on either
// way; its delivery is not dead.
type EffectError struct {
	// Kind is the effect's kind: "email", "payment", or the kind given to
	// Delivery.Effect.
	Kind string
	// Applied is true when the provider made the effect and only its
	// answer was lost.
	Applied bool
}

func (e *EffectError) Error() string {
	if e.Applied {
		return fmt.Sprintf("[twice] %s provider: the call timed out before its answer arrived (the provider may have made it)", e.Kind)
	}
	return fmt.Sprintf("[twice] %s provider: 503 service unavailable: the call was refused before it was made; try again", e.Kind)
}

// Timeout reports whether the call timed out, as net.Error does: true
// when the answer was lost.
func (e *EffectError) Timeout() bool { return e.Applied }

// Temporary reports true: both faults are transient.
func (e *EffectError) Temporary() bool { return true }

// Unwrap makes a lost answer match context.DeadlineExceeded, as
// net/http's client timeouts do; a refusal wraps nothing.
func (e *EffectError) Unwrap() error {
	if e.Applied {
		return context.DeadlineExceeded
	}
	return nil
}

// defaultKeyWindow is how long the payment fake remembers an idempotency
// key, as Stripe does.
const defaultKeyWindow = 24 * time.Hour

// effectLog records the effects of every delivery of one scenario (or one
// reference run), in the order the providers accepted them. The fakes'
// state that outlives a delivery, such as the payment provider's
// idempotency keys, lives here: the providers are systems outside the
// worker.
type effectLog struct {
	clock *clock

	mu      sync.Mutex
	entries []assert.Effect
	broken  error // the harness could not record an effect: the run is void

	payments paymentStore
}

// newEffectLog returns an empty log on clock. keyWindow is how long the
// payment fake remembers an idempotency key; zero or less means 24h.
func newEffectLog(clock *clock, keyWindow time.Duration) *effectLog {
	if keyWindow <= 0 {
		keyWindow = defaultKeyWindow
	}
	return &effectLog{clock: clock, payments: paymentStore{window: keyWindow, keys: map[string]*keyRecord{}}}
}

// forDelivery returns the effect fakes of one delivery: label is its text
// form ("j1a2w2"), steps its executor.
func (l *effectLog) forDelivery(label, jobID string, attempt int, steps effectSteps) *deliveryEffects {
	return &deliveryEffects{log: l, label: label, jobID: jobID, attempt: attempt, steps: steps}
}

// effects returns the log so far.
func (l *effectLog) effects() []assert.Effect {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

// fail marks the log broken: an effect the handler made could not be
// recorded, so no comparison of this run means anything.
func (l *effectLog) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.broken == nil {
		l.broken = err
	}
}

// err is why the log is broken, or nil.
func (l *effectLog) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.broken
}

func (l *effectLog) record(e assert.Effect) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, e)
}

// deliveryEffects is one delivery's door to its scenario's effect log.
type deliveryEffects struct {
	log     *effectLog
	label   string
	jobID   string
	attempt int
	steps   effectSteps
}

// call runs one effect as a step of the delivery and records it once the
// provider has answered. do returns what the provider answered: a result
// worth keeping, whether it replayed a stored answer, and the error. An
// effect fault the schedule puts on the call decides what the handler
// hears: a refused call never reaches do, and a call whose answer is lost
// runs do, is recorded as made, and returns a timeout to the handler.
func (fx *deliveryEffects) call(ctx context.Context, e assert.Effect, do func() (result string, replayed bool, err error)) error {
	label := e.String()
	fate, err := fx.steps.beginEffect(ctx, faults.Step{SQL: label, Effect: e.Kind, Key: e.Key})
	if err != nil {
		return err
	}
	defer fx.steps.endEffect(label)
	if fate == effectRefused {
		err = &EffectError{Kind: e.Kind}
	} else {
		var result string
		var replayed bool
		result, replayed, err = do()
		e.Result, e.Replayed = result, replayed
	}
	if err != nil {
		e.Err = err.Error()
	}
	if fate == effectReplyLost {
		e.ReplyLost = true
		err = &EffectError{Kind: e.Kind, Applied: true}
	}
	e.Delivery, e.JobID, e.Attempt = fx.label, fx.jobID, fx.attempt
	e.At = fx.log.clock.Now()
	fx.log.record(e)
	return err
}

// effects returns d's fakes, or nil for a Delivery the harness did not make.
func (d *Delivery) effects() *deliveryEffects {
	if d == nil {
		return nil
	}
	return d.fx
}

// errNoFakes is what a fake answers on a Delivery the harness did not make.
func errNoFakes(method string) error {
	return fmt.Errorf("[twice] %s: this Delivery was not made by the harness, so it has no effect fakes; use the *Delivery the harness passes to the handler", method)
}

// Effect makes a call to a system outside the database (the user's own
// SMS, push or webhook client) a recorded effect: the harness records it
// in the scenario's effect log, where the oracle judges it by its kind's
// policy (assert.Policy), and treats it as a step of the delivery, so a
// fault can kill the delivery just before the call or right after the
// provider accepted it.
//
// kind names the kind of effect ("sms") for policies and reports. key is
// the idempotency key the call sends, or empty; it is printed, not
// compared. payload is what the call asks for, as plain data that
// encoding/json can encode; two effects with the same kind and payload are
// the same effect, so put in it what makes the effect itself, and
// nothing that changes between runs of a correct handler (a timestamp, a
// random ID). call makes the real call; an error from it means the effect
// did not happen and is returned as it is.
//
// When the delivery is dead (a fault killed it) Effect returns an error
// without calling call, and nothing is recorded. Under an effect fault
// it returns an *EffectError: after calling call when the provider's
// answer was lost (the effect counts as made), without calling it when
// the provider refused.
//
// To check a handler that takes a client interface, hand it a wrapper that
// sends every call through Effect and on to a fake or a sandbox client:
//
//	type recordedSMS struct {
//		d    *harness.Delivery
//		next SMSClient
//	}
//
//	func (s recordedSMS) Send(ctx context.Context, to, text string) error {
//		return s.d.Effect(ctx, "sms", "", map[string]string{"to": to, "text": text},
//			func(ctx context.Context) error { return s.next.Send(ctx, to, text) })
//	}
func (d *Delivery) Effect(ctx context.Context, kind, key string, payload any, call func(ctx context.Context) error) error {
	fx := d.effects()
	switch {
	case fx == nil:
		return errNoFakes("Delivery.Effect")
	case kind == "":
		return errors.New(`[twice] Delivery.Effect: kind is empty; name the kind of effect ("sms") so policies and reports can refer to it`)
	case call == nil:
		return fmt.Errorf("[twice] Delivery.Effect(%q): call is nil; pass the function that calls your client", kind)
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		err = fmt.Errorf("[twice] Delivery.Effect(%q): the payload cannot be encoded as JSON (%w); pass plain data: a struct, a map, a string or a number", kind, err)
		fx.log.fail(err)
		return err
	}
	return fx.call(ctx, assert.Effect{Kind: kind, Key: key, Payload: raw}, func() (string, bool, error) {
		return "", false, call(ctx)
	})
}

// effectWindows says which differences in effects a scenario made
// unavoidable, for assert.EffectOptions. overlapped: some of its
// deliveries ran at once. faulted: the labels of the deliveries a crash or
// an ambiguous fault actually hit. log: the scenario's effects.
//
// A duplicate is unavoidable where deliveries overlapped or a faulted
// delivery had made an effect before the fault: its record of the effect
// may have died with it. A missing effect is unavoidable where any
// delivery was faulted: it may have recorded its intent and died before
// the effect. A lost ack makes neither: the delivery finished cleanly.
func effectWindows(overlapped bool, faulted map[string]bool, log []assert.Effect) (duplicates, missing bool) {
	duplicates = overlapped
	for _, e := range log {
		if e.Happened() && faulted[e.Delivery] {
			duplicates = true
		}
	}
	return duplicates, len(faulted) > 0
}
