package harness

// The fakes are built by the executor from unexported pieces, so these
// tests are internal: they stand in for the executor with effectSteps of
// their own.

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/runtwice/twice/faults"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twiceassert "github.com/runtwice/twice/assert"
)

// grantAll is an executor that grants every step at once.
type grantAll struct{}

func (grantAll) beginEffect(context.Context, faults.Step) (effectFate, error) {
	return effectAnswered, nil
}
func (grantAll) endEffect(string) {}

// deadSteps is the executor of a delivery a fault has killed.
type deadSteps struct{ err error }

func (s deadSteps) beginEffect(context.Context, faults.Step) (effectFate, error) { return 0, s.err }
func (deadSteps) endEffect(string)                                               { panic("endEffect after a refused beginEffect") }

// stepLog records the executor's calls, and what the effect log held at
// each endEffect.
type stepLog struct {
	log   *effectLog
	mu    sync.Mutex
	calls []string
	atEnd []int // len(log.effects()) at each endEffect
}

func (s *stepLog) beginEffect(_ context.Context, call faults.Step) (effectFate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "begin "+call.SQL)
	return effectAnswered, nil
}

func (s *stepLog) endEffect(label string) {
	n := len(s.log.effects())
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "end "+label)
	s.atEnd = append(s.atEnd, n)
}

// delivery returns a delivery of log's scenario, as the executor makes it.
func delivery(log *effectLog, label, jobID string, attempt int, steps effectSteps) *Delivery {
	return &Delivery{JobID: jobID, Attempt: attempt, clock: log.clock, fx: log.forDelivery(label, jobID, attempt, steps)}
}

func TestEffectRecordsTheCall(t *testing.T) {
	clock := newClock(defaultClockStart)
	log := newEffectLog(clock, 0)
	d := delivery(log, "j1a2w2", "twice-job-1", 2, grantAll{})
	type sms struct {
		To   string `json:"to"`
		Text string `json:"text"`
	}
	type ctxKey struct{}
	ctx := context.WithValue(context.Background(), ctxKey{}, "from the handler")
	var gotCtx context.Context
	err := d.Effect(ctx, "sms", "welcome-77", sms{To: "+3161234", Text: "Welcome!"}, func(ctx context.Context) error {
		gotCtx = ctx
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, "from the handler", gotCtx.Value(ctxKey{}), "call gets the handler's context")

	refused := errors.New("503 from the SMS gateway")
	err = d.Effect(ctx, "sms", "", "second", func(context.Context) error { return refused })
	assert.Same(t, refused, err, "the call's error is returned as it is")

	got := log.effects()
	require.Len(t, got, 2)
	assert.Equal(t, "sms", got[0].Kind)
	assert.Equal(t, "welcome-77", got[0].Key)
	assert.JSONEq(t, `{"to":"+3161234","text":"Welcome!"}`, string(got[0].Payload))
	assert.Equal(t, "j1a2w2", got[0].Delivery)
	assert.Equal(t, "twice-job-1", got[0].JobID)
	assert.Equal(t, 2, got[0].Attempt)
	assert.False(t, got[0].At.IsZero())
	assert.True(t, got[0].Happened())
	assert.Equal(t, "503 from the SMS gateway", got[1].Err)
	assert.False(t, got[1].Happened(), "a failed call did not happen")
	assert.False(t, got[1].At.Before(got[0].At), "entries are in the order they were accepted")
}

func TestEffectMisuse(t *testing.T) {
	log := newEffectLog(newClock(defaultClockStart), 0)
	d := delivery(log, "j1a1w1", "twice-job-1", 1, grantAll{})
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"empty kind", func() error { return d.Effect(ctx, "", "", nil, ok) }, `kind is empty`},
		{"nil call", func() error { return d.Effect(ctx, "sms", "", nil, nil) }, `Delivery.Effect("sms"): call is nil`},
		{"payload not JSON", func() error { return d.Effect(ctx, "sms", "", math.Inf(1), ok) }, `the payload cannot be encoded as JSON`},
		{"channel payload", func() error { return d.Effect(ctx, "sms", "", make(chan int), ok) }, `the payload cannot be encoded as JSON`},
		{"effect on a bare Delivery", func() error { return (&Delivery{}).Effect(ctx, "sms", "", nil, ok) }, `Delivery.Effect: this Delivery was not made by the harness`},
		{"effect on a nil Delivery", func() error { return (*Delivery)(nil).Effect(ctx, "sms", "", nil, ok) }, `not made by the harness`},
		{"mail on a bare Delivery", func() error { return (&Delivery{}).Mail().Send(ctx, Email{To: "a@b"}) }, `Mailer.Send: this Delivery was not made by the harness`},
		{"payment on a bare Delivery", func() error {
			_, err := (&Delivery{}).Payments().Pay(ctx, PaymentRequest{Destination: "acct_1", Amount: 1, Currency: "eur"})
			return err
		}, `Payments.Pay: this Delivery was not made by the harness`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), "[twice] "), err.Error())
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	assert.Empty(t, log.effects(), "misuse records nothing")
}

// A dead delivery's calls do not happen and are not recorded, and the
// payment provider never hears of them.
func TestDeadDeliveryRecordsNothing(t *testing.T) {
	log := newEffectLog(newClock(defaultClockStart), 0)
	killed := errors.New("[twice] delivery j1a1w1 crashed")
	dead := delivery(log, "j1a1w1", "twice-job-1", 1, deadSteps{err: killed})
	ctx := context.Background()
	req := PaymentRequest{IdempotencyKey: "payout-381", Destination: "acct_381", Amount: 5000, Currency: "eur"}

	called := false
	assert.Same(t, killed, dead.Effect(ctx, "sms", "", "hi", func(context.Context) error { called = true; return nil }))
	assert.False(t, called, "the user's client was called by a dead delivery")
	assert.Same(t, killed, dead.Mail().Send(ctx, Email{To: "asha@example.com", Subject: "Your receipt"}))
	pay, err := dead.Payments().Pay(ctx, req)
	assert.Same(t, killed, err)
	assert.Zero(t, pay)
	assert.Empty(t, log.effects())

	live := delivery(log, "j1a2w2", "twice-job-1", 2, grantAll{})
	pay, err = live.Payments().Pay(ctx, req)
	require.NoError(t, err)
	assert.False(t, pay.Replayed, "the dead delivery's key reached the provider")
}

// Every granted call ends its step once, after it is in the log, also
// when it fails; the executor may kill the delivery at endEffect and the
// effect must already count.
func TestEffectIsOneStep(t *testing.T) {
	log := newEffectLog(newClock(defaultClockStart), 0)
	steps := &stepLog{log: log}
	d := delivery(log, "j1a1w1", "twice-job-1", 1, steps)
	ctx := context.Background()
	require.NoError(t, d.Mail().Send(ctx, Email{To: "asha@example.com", Subject: "Your receipt"}))
	_, err := d.Payments().Pay(ctx, PaymentRequest{IdempotencyKey: "k", Destination: DeclinedDestination, Amount: 1, Currency: "eur"})
	require.Error(t, err)
	require.Error(t, d.Effect(ctx, "sms", "", map[string]string{"to": "+31"}, func(context.Context) error { return errors.New("down") }))
	func() {
		defer func() { assert.Equal(t, "boom", recover()) }()
		_ = d.Effect(ctx, "push", "", nil, func(context.Context) error { panic("boom") })
	}()

	assert.Equal(t, []string{
		`begin email to=asha@example.com subject="Your receipt" body=""`,
		`end email to=asha@example.com subject="Your receipt" body=""`,
		`begin payment key=k destination=acct_declined amount=1 currency=eur`,
		`end payment key=k destination=acct_declined amount=1 currency=eur`,
		`begin sms to=+31`,
		`end sms to=+31`,
		`begin push`,
		`end push`,
	}, steps.calls)
	assert.Equal(t, []int{1, 2, 3, 3}, steps.atEnd, "entries in the log at each endEffect; a panicking call records nothing")
}

// Deliveries running at once share one log without losing entries.
func TestEffectLogConcurrentDeliveries(t *testing.T) {
	log := newEffectLog(newClock(defaultClockStart), 0)
	const deliveries, sends = 8, 25
	var wg sync.WaitGroup
	for i := range deliveries {
		d := delivery(log, "j1a1w1", "twice-job-1", i+1, grantAll{})
		wg.Go(func() {
			for range sends {
				assert.NoError(t, d.Mail().Send(context.Background(), Email{To: "asha@example.com"}))
				_, err := d.Payments().Pay(context.Background(), PaymentRequest{IdempotencyKey: "shared", Destination: "acct_381", Amount: 5000, Currency: "eur"})
				var perr *PaymentError
				if err != nil && (!errors.As(err, &perr) || perr.Code != "idempotency_key_in_use") {
					t.Errorf("Pay: %v", err)
				}
			}
		})
	}
	wg.Wait()
	var emails, payments int
	for _, e := range log.effects() {
		switch {
		case e.Kind == "email":
			emails++
		case e.Kind == "payment" && e.Happened():
			payments++
		}
	}
	assert.Equal(t, deliveries*sends, emails)
	assert.Equal(t, 1, payments, "one key, one payment, however many deliveries ask at once")
}

func TestEffectPayloadIsJSON(t *testing.T) {
	log := newEffectLog(newClock(defaultClockStart), 0)
	d := delivery(log, "j1a1w1", "twice-job-1", 1, grantAll{})
	require.NoError(t, d.Mail().Send(context.Background(), Email{To: "asha@example.com", Subject: "Your receipt", Body: "Thanks"}))
	b, err := json.Marshal(log.effects())
	require.NoError(t, err)
	var back []twiceassert.Effect
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Nil(t, twiceassert.DiffEffects(log.effects(), back, twiceassert.EffectOptions{}), "an effect log survives JSON")
}

func TestEffectWindows(t *testing.T) {
	sent := func(delivery string) twiceassert.Effect {
		return twiceassert.Effect{Kind: "email", Payload: json.RawMessage(`{}`), Delivery: delivery}
	}
	failedSend := sent("j1a1w1")
	failedSend.Err = "down"
	tests := []struct {
		name                string
		overlapped          bool
		faulted             map[string]bool
		log                 []twiceassert.Effect
		duplicates, missing bool
	}{
		{name: "run twice", log: []twiceassert.Effect{sent("j1a1w1"), sent("j1a2w2")}},
		{name: "overlap", overlapped: true, log: []twiceassert.Effect{sent("j1a1w1")}, duplicates: true},
		{name: "crash after an effect", faulted: map[string]bool{"j1a1w1": true}, log: []twiceassert.Effect{sent("j1a1w1"), sent("j1a2w2")}, duplicates: true, missing: true},
		{name: "crash before any effect", faulted: map[string]bool{"j1a1w1": true}, log: []twiceassert.Effect{sent("j1a2w2")}, missing: true},
		{name: "crash after a failed call", faulted: map[string]bool{"j1a1w1": true}, log: []twiceassert.Effect{failedSend}, missing: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dups, missing := effectWindows(tt.overlapped, tt.faulted, tt.log)
			assert.Equal(t, tt.duplicates, dups, "duplicates")
			assert.Equal(t, tt.missing, missing, "missing")
		})
	}
}
