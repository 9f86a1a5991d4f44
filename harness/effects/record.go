package effects

import (
	"context"
	"encoding/json"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/internal/blame"
)

// Record makes a call to a system outside the database (the user's own
// SMS, push or webhook client) a recorded effect; harness.Delivery.Effect
// is the way a handler reaches it. The call is recorded in the
// scenario's effect log, where the oracle judges it by its kind's policy
// (assert.Policy), and is a step of the delivery, so a fault can kill the
// delivery just before the call or right after the provider accepted it.
//
// kind names the kind of effect ("sms") for policies and reports. key is
// the idempotency key the call sends, or empty; it is printed, not
// compared. payload is what the call asks for, as plain data that
// encoding/json can encode; two effects with the same kind and payload
// are the same effect, so put in it what makes the effect itself, and
// nothing that changes between runs of a correct handler (a timestamp, a
// random ID). call makes the real call; an error from it means the effect
// did not happen and is returned as it is.
//
// When the delivery is dead (a fault killed it) Record returns an error
// without calling call, and nothing is recorded. Under an effect fault it
// returns a *CallError: after calling call when the provider's answer was
// lost (the effect counts as made), without calling it when the provider
// refused.
func (c *Clients) Record(ctx context.Context, kind, key string, payload any, call func(ctx context.Context) error) error {
	switch {
	case c == nil:
		return errNoFakes("Delivery.Effect")
	case kind == "":
		return blame.Userf(`Delivery.Effect: kind is empty; name the kind of effect ("sms") so policies and reports can refer to it`)
	case call == nil:
		return blame.Userf("Delivery.Effect(%q): call is nil; pass the function that calls your client", kind)
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		err = blame.Userf("Delivery.Effect(%q): the payload cannot be encoded as JSON (%w); pass plain data: a struct, a map, a string or a number", kind, err)
		c.log.fail(err)
		return err
	}
	return c.call(ctx, assert.Effect{Kind: kind, Key: key, Payload: raw}, func() (string, bool, error) {
		return "", false, call(ctx)
	})
}
