package effects

import (
	"context"
	"fmt"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/internal/text"
)

// Steps makes a delivery's effect calls steps of its schedule, like its
// statements. The harness's executor implements it for every delivery it
// runs and passes it to Log.Clients; a test of a client wrapper may pass
// one that grants every call.
type Steps interface {
	// Begin blocks until the schedule grants call, and says how the
	// provider replies to it. An error means the delivery is dead: the
	// call must not happen, is not recorded, and the handler gets the
	// error.
	Begin(ctx context.Context, call faults.Step) (Reply, error)
	// End reports that the provider has answered call and the answer is
	// in the log; the schedule may kill the delivery right here ("crash
	// after an effect"). It is called once after every Begin that
	// returned no error, also when the call failed or panicked.
	End(call faults.Step)
}

// Reply is how the provider replies to a call the schedule granted: the
// executor's side of an effect call. What became of the step, as a
// result records it, is a result.Fate.
type Reply int

const (
	// Answered: the provider handles the call and the handler hears its
	// answer.
	Answered Reply = iota
	// ReplyLost: the provider handles the call, but its answer is lost;
	// the handler's call times out (faults.KindEffectLostReply).
	ReplyLost
	// Refused: the provider refuses the call before handling it, a 503
	// (faults.KindEffectFailed).
	Refused
	// AnsweredLate: the provider handles the call, but its answer comes
	// after the client gave up waiting (faults.KindEffectSlow): an HTTP
	// call returns the client's own timeout error, any other call times
	// out as under ReplyLost.
	AnsweredLate
)

var replyNames = [...]string{Answered: "answered", ReplyLost: "reply-lost", Refused: "refused", AnsweredLate: "answered-late"}

// String names the reply: "answered", "reply-lost", "refused",
// "answered-late".
func (r Reply) String() string {
	return text.Name(replyNames[:], r, "Reply")
}

// CallError is what an effect call returns when the schedule puts an effect
// fault on it: the provider made the effect and its answer was lost
// (faults.KindEffectLostReply; Applied is true, Timeout reports true, and
// errors.Is(err, context.DeadlineExceeded) holds, as for an HTTP client's
// timeout), or the provider refused the call before making it
// (faults.KindEffectFailed; a 503, Applied is false). Both are transient:
// a retry with the same idempotency key gets the stored answer of an
// applied payment, or makes a refused one. The handler goes on either
// way; its delivery is not dead. (A result.Error is something else: an
// error a result carries, kept as its message in a check's record.)
type CallError struct {
	// Kind is the effect's kind: "email", "payment", or the kind given to
	// harness.Delivery.Effect.
	Kind string
	// Applied is true when the provider made the effect and only its
	// answer was lost.
	Applied bool
	// Late is true, with Applied, when the answer was not lost but came
	// after the client's timeout (faults.KindEffectSlow).
	Late bool
}

// Error says what the handler's client would: a timeout, or a 503.
func (e *CallError) Error() string {
	if e.Applied {
		return fmt.Sprintf("%s provider: the call timed out before its answer arrived (the provider may have made it)", e.Kind)
	}
	return fmt.Sprintf("%s provider: 503 service unavailable: the call was refused before it was made; try again", e.Kind)
}

// Timeout reports whether the call timed out, as net.Error does: true
// when the answer was lost.
func (e *CallError) Timeout() bool { return e.Applied }

// Temporary reports true: both faults are transient.
func (e *CallError) Temporary() bool { return true }

// Unwrap makes a lost answer match context.DeadlineExceeded, as
// net/http's client timeouts do; a refusal wraps nothing.
func (e *CallError) Unwrap() error {
	if e.Applied {
		return context.DeadlineExceeded
	}
	return nil
}
