package harness_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twiceassert "github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
)

// What a handler saw from its effect calls once one failed, per attempt:
// the clean reference runs see no error and leave nothing here.
type sawCalls struct {
	mu   sync.Mutex
	errs map[int][]error
}

func (s *sawCalls) add(attempt int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.errs == nil {
		s.errs = map[int][]error{}
	}
	s.errs[attempt] = append(s.errs[attempt], err)
}

func (s *sawCalls) of(attempt int) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errs[attempt]
}

var charge = effects.PaymentRequest{IdempotencyKey: "order-9812", Destination: "acct_77", Amount: 500, Currency: "eur"}

// payThenLog pays (step 1), retries once with the same key when the call
// timed out (step 2), and logs the payment (the last step): a handler
// that lives on after its call failed.
func payThenLog(saw *sawCalls, retry bool) harness.Handler {
	return func(ctx context.Context, d *harness.Delivery) error {
		pay, err := d.Payments().Pay(ctx, charge)
		if err != nil {
			saw.add(d.Attempt, err)
		}
		var timeout interface{ Timeout() bool }
		if retry && errors.As(err, &timeout) && timeout.Timeout() {
			pay, err = d.Payments().Pay(ctx, charge)
			saw.add(d.Attempt, err)
		}
		if err != nil {
			return err
		}
		_, err = d.DB.Exec(ctx, `INSERT INTO log VALUES (1, $1)`, pay.ID)
		return err
	}
}

// The provider takes the payment and its answer is lost: the handler's
// call times out, the handler lives on, and the same key again gets the
// stored payment back, so no money moves twice.
func TestEffectLostReply(t *testing.T) {
	var saw sawCalls
	job := harness.Job{Name: "pay", Handler: payThenLog(&saw, true)}
	res := replay(t, job, "j1a1w1!lostreply:1")
	sc := res.Scenarios[0]

	require.Len(t, saw.of(1), 2)
	err := saw.of(1)[0]
	var fault *effects.CallError
	require.ErrorAs(t, err, &fault)
	assert.Equal(t, &effects.CallError{Kind: "payment", Applied: true}, fault)
	assert.True(t, fault.Timeout(), "a lost answer is a timeout")
	assert.ErrorIs(t, err, context.DeadlineExceeded, "as an HTTP client's timeout is")
	assert.NoError(t, saw.of(1)[1], "the retry with the same key gets the stored answer")

	assert.Equal(t, result.Idempotent, sc.Verdict, "%+v", sc)
	require.Len(t, sc.Deliveries, 1, "the delivery lived on and completed: no retry from the queue")
	d := sc.Deliveries[0]
	assert.Equal(t, "lost the answer to step 1, which the provider made; the call timed out: effect: payment key=order-9812 destination=acct_77 amount=500 currency=eur", d.Fault)
	assert.Empty(t, d.Err)
	require.Len(t, d.Steps, 3, "both calls and the insert")
	assert.Equal(t, result.TimedOut, d.Steps[0].Fate, "the call completed at the provider, and its answer was lost")
	assert.Equal(t, d.Steps[0], *d.Faulted())

	require.Len(t, sc.Effects, 2)
	assert.True(t, sc.Effects[0].Happened(), "the provider made the payment")
	assert.True(t, sc.Effects[0].ReplyLost)
	assert.Equal(t, "py_1", sc.Effects[0].Result)
	assert.True(t, sc.Effects[1].Replayed, "the retry was answered from the key")
	assert.Equal(t, "py_1", sc.Effects[1].Result)
}

// The provider takes the payment and the worker dies before it hears
// back: the payment stays, the log row the first delivery would have
// written next does not, and the redelivery's same key gets the stored
// payment, so nothing moves twice.
func TestCrashAfterEffect(t *testing.T) {
	var saw sawCalls
	job := harness.Job{Name: "pay", Handler: payThenLog(&saw, false)}
	sc := replay(t, job, "j1a1w1!crashafter:1 > +30s j1a2w2").Scenarios[0]

	assert.Empty(t, saw.of(1), "the dead delivery never saw its call return")
	assert.Equal(t, result.Idempotent, sc.Verdict, "%+v", sc)
	require.Len(t, sc.Deliveries, 2)
	assert.Equal(t, "crashed right after step 1: effect: payment key=order-9812 destination=acct_77 amount=500 currency=eur", sc.Deliveries[0].Fault)
	assert.Len(t, sc.Deliveries[0].Steps, 1, "the payment, and no insert after it")
	require.Len(t, sc.Effects, 2)
	assert.True(t, sc.Effects[0].Happened(), "the provider made the payment")
	assert.True(t, sc.Effects[1].Replayed, "the redelivery got the stored payment")
}

// A lost reply is a statement's: on an effect call it is refused at once,
// naming the kind that dies right after one.
func TestAmbiguousOnAnEffectIsRefused(t *testing.T) {
	var saw sawCalls
	job := harness.Job{Name: "pay", Handler: payThenLog(&saw, false)}
	s, err := faults.Parse("j1a1w1!ambiguous:1 > +30s j1a2w2")
	require.NoError(t, err)
	_, err = harness.Run(t.Context(), job, harness.Config{Setup: []harness.Setup{harness.SQL(stepsSchema)}, Faults: []faults.Fault{faults.Replay(s)}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `j1a1w1!ambiguous:1 loses a statement's reply, but step 1 of job "pay"'s clean run is an effect call`)
	assert.Contains(t, err.Error(), "use j1a1w1!crashafter:1")
}

// Without a retry the handler fails, the queue redelivers, and the key
// still saves it.
func TestEffectLostReplyQueueRetry(t *testing.T) {
	var saw sawCalls
	job := harness.Job{Name: "pay", Handler: payThenLog(&saw, false)}
	sc := replay(t, job, "j1a1w1!lostreply:1").Scenarios[0]
	assert.Equal(t, result.Idempotent, sc.Verdict, "%+v", sc)
	require.Len(t, sc.Deliveries, 2)
	assert.Contains(t, sc.Deliveries[0].Err, "the call timed out")
	assert.True(t, sc.Deliveries[1].QueueRetry)
	require.Len(t, sc.Effects, 2)
	assert.True(t, sc.Effects[1].Replayed, "the queue's retry got the stored payment")
}

// The provider refuses the call with a 503 before making it: nothing is
// paid or stored under the key, so the retry with the same key pays.
func TestEffectFailed(t *testing.T) {
	var saw sawCalls
	job := harness.Job{Name: "pay", Handler: payThenLog(&saw, false)}
	res := replay(t, job, "j1a1w1!failed:1")
	sc := res.Scenarios[0]

	var fault *effects.CallError
	require.Len(t, saw.of(1), 1)
	require.ErrorAs(t, saw.of(1)[0], &fault)
	assert.False(t, fault.Applied)
	assert.False(t, fault.Timeout())
	assert.True(t, fault.Temporary())
	assert.NotErrorIs(t, saw.of(1)[0], context.DeadlineExceeded)
	assert.Contains(t, fault.Error(), "503")

	assert.Equal(t, result.Idempotent, sc.Verdict, "%+v", sc)
	require.Len(t, sc.Deliveries, 2, "the delivery failed and the queue retried it")
	assert.Equal(t, "had step 1 refused by the provider before it was made (a transient refusal): effect: payment key=order-9812 destination=acct_77 amount=500 currency=eur", sc.Deliveries[0].Fault)
	require.Len(t, sc.Effects, 2)
	assert.False(t, sc.Effects[0].Happened(), "the refused call did not happen")
	assert.Contains(t, sc.Effects[0].Err, "503")
	assert.True(t, sc.Effects[1].Happened(), "the retry paid")
	assert.False(t, sc.Effects[1].Replayed, "nothing was stored under the key")
	assert.Equal(t, "py_1", sc.Effects[1].Result)
}

// The same faults through the mail fake and a user's own client: a lost
// answer sends the email (and runs the client), a refusal sends nothing
// (and never calls the client).
func TestEffectFaultsOnMailAndOwnClients(t *testing.T) {
	for _, tt := range []struct {
		schedule string
		happened bool
	}{
		{"j1a1w1!lostreply:1", true},
		{"j1a1w1!failed:1", false},
	} {
		t.Run(tt.schedule, func(t *testing.T) {
			var mu sync.Mutex
			var saw []error
			var calls int
			job := harness.Job{Name: "notify", Handler: func(ctx context.Context, d *harness.Delivery) error {
				err := d.Mail().Send(ctx, effects.Email{To: "a@example.com", Subject: "Hi"})
				err2 := d.Effect(ctx, "sms", "", "hi", func(context.Context) error {
					mu.Lock()
					calls++
					mu.Unlock()
					return nil
				})
				mu.Lock()
				defer mu.Unlock()
				saw = append(saw, err, err2)
				return nil // a handler that shrugs: no retry
			}}
			sc := replay(t, job, tt.schedule).Scenarios[0]
			mu.Lock()
			runs := 3 // two clean runs and the scenario
			if sc.Verdict != result.Idempotent {
				runs++ // its confirming rerun
			}
			require.Len(t, saw, 2*runs, "two clean runs and the scenario, and its rerun when it failed")
			var fault *effects.CallError
			require.ErrorAs(t, saw[4], &fault, "the scenario's email")
			assert.Equal(t, "email", fault.Kind)
			assert.NoError(t, saw[5], "only step 1 is faulted")
			assert.Equal(t, runs, calls, "the SMS of step 2 went out every time")
			mu.Unlock()
			require.Len(t, sc.Effects, 2)
			assert.Equal(t, tt.happened, sc.Effects[0].Happened(), "the email")
			assert.True(t, sc.Effects[1].Happened(), "the SMS")

			calls = 0
			smsOnly := harness.Job{Name: "sms", Handler: func(ctx context.Context, d *harness.Delivery) error {
				err := d.Effect(ctx, "sms", "", "hi", func(context.Context) error {
					mu.Lock()
					calls++
					mu.Unlock()
					return nil
				})
				if err != nil {
					require.ErrorAs(t, err, &fault)
					assert.Equal(t, "sms", fault.Kind)
				}
				return nil
			}}
			sc = replay(t, smsOnly, tt.schedule).Scenarios[0]
			require.Len(t, sc.Effects, 1)
			assert.Equal(t, tt.happened, sc.Effects[0].Happened())
			want := 2 // the clean runs
			if tt.happened {
				want++
			}
			if sc.Verdict != result.Idempotent && tt.happened {
				want++ // the confirming rerun's
			}
			mu.Lock()
			assert.Equal(t, want, calls, "whether the user's client was called")
			mu.Unlock()
		})
	}
}

// An effect fault acts only on an effect call of the clean run; anywhere
// else it would never happen, and the check says so.
func TestEffectFaultOnAStatementIsRefused(t *testing.T) {
	job := harness.Job{Name: "pay", Handler: payThenLog(&sawCalls{}, false)}
	for schedule, want := range map[string]string{
		"j1a1w1!lostreply:2": `j1a1w1!lostreply:2 acts on an effect call, but step 2 of job "pay"'s clean run is a statement (INSERT INTO log VALUES (1, $1)), so the fault would never happen; its effect calls are step 1`,
		"j1a1w1!failed:3":    `j1a1w1!failed:3 acts on step 3, but job "pay" takes 2 steps on a clean run, so the fault would never happen; its effect calls are step 1`,
	} {
		s, err := faults.Parse(schedule)
		require.NoError(t, err)
		_, err = harness.Run(t.Context(), job, harness.Config{
			Setup:  []harness.Setup{harness.SQL(stepsSchema)},
			Faults: []faults.Fault{faults.Replay(s)},
		})
		require.Error(t, err, schedule)
		assert.Contains(t, err.Error(), want)
	}
}

// An at-least-once email whose answer was lost may be sent again: the
// handler cannot know it went out. An exactly-once one may not.
func TestLostReplyMakesADuplicateUnavoidable(t *testing.T) {
	job := harness.Job{Name: "receipt", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return d.Mail().Send(ctx, effects.Email{To: "a@example.com", Subject: "Receipt"})
	}}
	atLeastOnce := replay(t, job, "j1a1w1!lostreply:1", func(c *harness.Config) {
		c.EffectPolicies = map[string]twiceassert.Policy{"email": twiceassert.AtLeastOnce}
	}).Scenarios[0]
	assert.Equal(t, result.Idempotent, atLeastOnce.Verdict, "%+v", atLeastOnce.EffectDiff)
	assert.Len(t, atLeastOnce.Effects, 2, "sent, then sent again by the queue's retry")

	exactlyOnce := replay(t, job, "j1a1w1!lostreply:1").Scenarios[0]
	assert.Equal(t, result.NotIdempotent, exactlyOnce.Verdict)
	require.NotNil(t, exactlyOnce.EffectDiff)
	assert.Equal(t, 1, exactlyOnce.EffectDiff.Extra)
}
