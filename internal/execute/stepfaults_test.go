package execute

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/wireproxy"
)

// TestStepFaults reads the fault table as give does, with no server: for
// each fault kind that acts on a step, what it does to a statement and to
// an effect call at the step it names, and that it does nothing at any
// other step. (A crash before a step kills the delivery's connections and
// is run against a server in harness's tests.)
func TestStepFaults(t *testing.T) {
	type got struct {
		answered, midJob bool
		reply            effects.Reply
		end              result.Fate
		fault            string
		grant            wireproxy.Action
	}
	const none = wireproxy.Action(-1)
	for _, tc := range []struct {
		name   string
		kind   faults.Kind
		effect bool
		want   got
	}{
		{"ambiguous statement: applied, reply lost", faults.KindAmbiguous, false, got{answered: true, midJob: true, end: result.ReplyLost,
			fault: "step 2 was applied but its reply was lost: UPDATE t SET n = n + 1", grant: wireproxy.Ambiguous}},
		{"ambiguous on an effect: not met", faults.KindAmbiguous, true, got{
			fault: "did not meet its ambiguous fault: step 2 is an effect call, not a statement: UPDATE t SET n = n + 1", grant: none}},
		{"crash after an effect: dies once it returns", faults.KindCrashAfterEffect, true, got{midJob: true, end: result.CrashedAfter, grant: none}},
		{"crash after an effect on a statement: not met", faults.KindCrashAfterEffect, false, got{
			fault: "did not meet its crashafter fault: step 2 is a statement, not an effect call: UPDATE t SET n = n + 1", grant: none}},
		{"lost reply of an effect", faults.KindEffectLostReply, true, got{midJob: true, reply: effects.ReplyLost, end: result.TimedOut,
			fault: "lost the answer to step 2, which the provider made; the call timed out: UPDATE t SET n = n + 1", grant: none}},
		{"slow effect", faults.KindEffectSlow, true, got{midJob: true, reply: effects.AnsweredLate, end: result.TimedOut,
			fault: "had the answer to step 2, which the provider made, come after the client's timeout: UPDATE t SET n = n + 1", grant: none}},
		{"refused effect", faults.KindEffectFailed, true, got{midJob: true, reply: effects.Refused, end: result.Refused,
			fault: "had step 2 refused by the provider before it was made (a transient refusal): UPDATE t SET n = n + 1", grant: none}},
		{"outage", faults.KindEffectOutage, true, got{midJob: true, reply: effects.ReplyLost, end: result.TimedOut,
			fault: "lost the answer to step 2, which the provider made, and to every retry of it with its key; the calls timed out: UPDATE t SET n = n + 1", grant: none}},
		{"lost ack acts on the return, not a step", faults.KindLostAck, false, got{grant: none}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, seq := range []int{1, 2, 3} {
				d := &deliveryRun{spec: faults.Scheduled{Job: 1, Attempt: 1, Worker: 1, Fault: tc.kind, At: 2}, bySQL: map[int]*stepRequest{}}
				req := &stepRequest{d: d, seq: seq, effect: tc.effect, step: wireproxy.Step{SQL: "UPDATE t SET n = n + 1"},
					call: faults.Step{Key: "k"}, grant: make(chan wireproxy.Action, 1)}
				e := &execution{}
				answered := e.atFault(d, req)
				g := got{answered: answered, midJob: d.midJobFault, reply: req.reply, end: req.end, fault: d.outcome.Fault, grant: none}
				select {
				case g.grant = <-req.grant:
				default:
				}
				if seq != 2 {
					assert.Equal(t, got{grant: none}, g, "step %d, not the fault's", seq)
					continue
				}
				assert.Equal(t, tc.want, g)
			}
		})
	}
}
