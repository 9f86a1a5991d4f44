package effects_test

// These tests stand in for the harness's executor with Steps of their own.

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twiceassert "github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/internal/blame"
)

// start is where every test clock starts.
var start = time.Date(2026, time.January, 1, 9, 0, 0, 0, time.UTC)

// testClock is a harness clock: it moves only when told.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *testClock { return &testClock{now: start} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newLog returns an empty log on clock whose payment provider remembers
// keys for window.
func newLog(t *testing.T, clock *testClock, window time.Duration) *effects.Log {
	t.Helper()
	log, err := effects.NewLog(clock.Now, effects.Providers{Payments: effects.PaymentProvider{KeyWindow: window}})
	require.NoError(t, err)
	return log
}

// grantAll is an executor that grants every step at once.
type grantAll struct{}

func (grantAll) Begin(context.Context, faults.Step) (effects.Reply, error) {
	return effects.Answered, nil
}
func (grantAll) End(faults.Step) {}

// deadSteps is the executor of a delivery a fault has killed.
type deadSteps struct{ err error }

func (s deadSteps) Begin(context.Context, faults.Step) (effects.Reply, error) { return 0, s.err }
func (deadSteps) End(faults.Step)                                             { panic("End after a refused Begin") }

// stepLog records the executor's calls, and what the effect log held at
// each End.
type stepLog struct {
	log   *effects.Log
	mu    sync.Mutex
	calls []string
	atEnd []int // len(log.Effects()) at each End
}

func (s *stepLog) Begin(_ context.Context, call faults.Step) (effects.Reply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "begin "+call.SQL)
	return effects.Answered, nil
}

func (s *stepLog) End(call faults.Step) {
	n := len(s.log.Effects())
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "end "+call.SQL)
	s.atEnd = append(s.atEnd, n)
}

func TestEffectRecordsTheCall(t *testing.T) {
	clock := newClock()
	log := newLog(t, clock, 0)
	d := log.Clients("j1a2w2", "twice-job-1", 2, grantAll{})
	type sms struct {
		To   string `json:"to"`
		Text string `json:"text"`
	}
	type ctxKey struct{}
	ctx := context.WithValue(context.Background(), ctxKey{}, "from the handler")
	var gotCtx context.Context
	err := d.Record(ctx, "sms", "welcome-77", sms{To: "+3161234", Text: "Welcome!"}, func(ctx context.Context) error {
		gotCtx = ctx
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, "from the handler", gotCtx.Value(ctxKey{}), "call gets the handler's context")

	refused := errors.New("503 from the SMS gateway")
	err = d.Record(ctx, "sms", "", "second", func(context.Context) error { return refused })
	assert.Same(t, refused, err, "the call's error is returned as it is")

	got := log.Effects()
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
	log := newLog(t, newClock(), 0)
	d := log.Clients("j1a1w1", "twice-job-1", 1, grantAll{})
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"empty kind", func() error { return d.Record(ctx, "", "", nil, ok) }, `kind is empty`},
		{"nil call", func() error { return d.Record(ctx, "sms", "", nil, nil) }, `Delivery.Effect("sms"): call is nil`},
		{"payload not JSON", func() error { return d.Record(ctx, "sms", "", math.Inf(1), ok) }, `the payload cannot be encoded as JSON`},
		{"channel payload", func() error { return d.Record(ctx, "sms", "", make(chan int), ok) }, `the payload cannot be encoded as JSON`},
		{"record on nil Clients", func() error { return (*effects.Clients)(nil).Record(ctx, "sms", "", nil, ok) }, `Delivery.Effect: this Delivery was not made by the harness`},
		{"mail on nil Clients", func() error { return (*effects.Clients)(nil).Mail().Send(ctx, effects.Email{To: "a@b"}) }, `Mailer.Send: this Delivery was not made by the harness`},
		{"zero Mailer", func() error { return (&effects.Mailer{}).Send(ctx, effects.Email{To: "a@b"}) }, `Mailer.Send: this Delivery was not made by the harness`},
		{"payment on nil Clients", func() error {
			_, err := (*effects.Clients)(nil).Payments().Pay(ctx, effects.PaymentRequest{Destination: "acct_1", Amount: 1, Currency: "eur"})
			return err
		}, `Payments.Pay: this Delivery was not made by the harness`},
		{"zero Payments", func() error {
			_, err := (&effects.Payments{}).Pay(ctx, effects.PaymentRequest{Destination: "acct_1", Amount: 1, Currency: "eur"})
			return err
		}, `Payments.Pay: this Delivery was not made by the harness`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			require.Error(t, err)
			assert.True(t, blame.IsUser(err), "misuse is the user's: %v", err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	assert.Empty(t, log.Effects(), "misuse records nothing")
}

// A dead delivery's calls do not happen and are not recorded, and the
// payment provider never hears of them.
func TestDeadDeliveryRecordsNothing(t *testing.T) {
	log := newLog(t, newClock(), 0)
	killed := errors.New("delivery j1a1w1 crashed")
	dead := log.Clients("j1a1w1", "twice-job-1", 1, deadSteps{err: killed})
	ctx := context.Background()
	req := effects.PaymentRequest{IdempotencyKey: "payout-381", Destination: "acct_381", Amount: 5000, Currency: "eur"}

	called := false
	assert.Same(t, killed, dead.Record(ctx, "sms", "", "hi", func(context.Context) error { called = true; return nil }))
	assert.False(t, called, "the user's client was called by a dead delivery")
	assert.Same(t, killed, dead.Mail().Send(ctx, effects.Email{To: "asha@example.com", Subject: "Your receipt"}))
	pay, err := dead.Payments().Pay(ctx, req)
	assert.Same(t, killed, err)
	assert.Zero(t, pay)
	assert.Empty(t, log.Effects())

	live := log.Clients("j1a2w2", "twice-job-1", 2, grantAll{})
	pay, err = live.Payments().Pay(ctx, req)
	require.NoError(t, err)
	assert.False(t, pay.Replayed, "the dead delivery's key reached the provider")
}

// Every granted call ends its step once, after it is in the log, also
// when it fails; the executor may kill the delivery at endEffect and the
// effect must already count.
func TestEffectIsOneStep(t *testing.T) {
	log := newLog(t, newClock(), 0)
	steps := &stepLog{log: log}
	d := log.Clients("j1a1w1", "twice-job-1", 1, steps)
	ctx := context.Background()
	require.NoError(t, d.Mail().Send(ctx, effects.Email{To: "asha@example.com", Subject: "Your receipt"}))
	_, err := d.Payments().Pay(ctx, effects.PaymentRequest{IdempotencyKey: "k", Destination: effects.DeclinedDestination, Amount: 1, Currency: "eur"})
	require.Error(t, err)
	require.Error(t, d.Record(ctx, "sms", "", map[string]string{"to": "+31"}, func(context.Context) error { return errors.New("down") }))
	func() {
		defer func() { assert.Equal(t, "boom", recover()) }()
		_ = d.Record(ctx, "push", "", nil, func(context.Context) error { panic("boom") })
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
	log := newLog(t, newClock(), 0)
	const deliveries, sends = 8, 25
	var wg sync.WaitGroup
	for i := range deliveries {
		d := log.Clients("j1a1w1", "twice-job-1", i+1, grantAll{})
		wg.Go(func() {
			for range sends {
				assert.NoError(t, d.Mail().Send(context.Background(), effects.Email{To: "asha@example.com"}))
				_, err := d.Payments().Pay(context.Background(), effects.PaymentRequest{IdempotencyKey: "shared", Destination: "acct_381", Amount: 5000, Currency: "eur"})
				var perr *effects.PaymentError
				if err != nil && (!errors.As(err, &perr) || perr.Code != "idempotency_key_in_use") {
					t.Errorf("Pay: %v", err)
				}
			}
		})
	}
	wg.Wait()
	var emails, payments int
	for _, e := range log.Effects() {
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
	log := newLog(t, newClock(), 0)
	d := log.Clients("j1a1w1", "twice-job-1", 1, grantAll{})
	require.NoError(t, d.Mail().Send(context.Background(), effects.Email{To: "asha@example.com", Subject: "Your receipt", Body: "Thanks"}))
	b, err := json.Marshal(log.Effects())
	require.NoError(t, err)
	var back []twiceassert.Effect
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Nil(t, twiceassert.DiffEffects(log.Effects(), back, twiceassert.EffectOptions{}), "an effect log survives JSON")
}

// replying is an executor that gives every call the same reply.
type replying effects.Reply

func (f replying) Begin(context.Context, faults.Step) (effects.Reply, error) {
	return effects.Reply(f), nil
}
func (replying) End(faults.Step) {}

// The reply the executor answers decides what the provider does and what
// the handler hears; the delivery goes on either way.
func TestFateDecidesWhatTheHandlerHears(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		reply     effects.Reply
		called    bool // the user's client was called
		applied   bool // *effects.CallError.Applied
		replyLost bool // the log's ReplyLost
		happened  bool
	}{
		{reply: effects.ReplyLost, called: true, applied: true, replyLost: true, happened: true},
		{reply: effects.Refused},
	}
	for _, tt := range tests {
		t.Run(tt.reply.String(), func(t *testing.T) {
			log := newLog(t, newClock(), 0)
			c := log.Clients("j1a1w1", "twice-job-1", 1, replying(tt.reply))
			called := false
			err := c.Record(ctx, "sms", "", "hi", func(context.Context) error { called = true; return nil })
			var ferr *effects.CallError
			require.ErrorAs(t, err, &ferr)
			assert.Equal(t, &effects.CallError{Kind: "sms", Applied: tt.applied}, ferr)
			assert.Equal(t, tt.applied, ferr.Timeout())
			assert.True(t, ferr.Temporary())
			assert.Equal(t, tt.applied, errors.Is(err, context.DeadlineExceeded), "a lost answer is a timeout, a refusal is not")
			assert.Equal(t, tt.called, called, "the user's client was called")

			got := log.Effects()
			require.Len(t, got, 1, "a faulted call is in the log either way")
			assert.Equal(t, tt.replyLost, got[0].ReplyLost)
			assert.Equal(t, tt.happened, got[0].Happened())

			// A payment refused is not paid or stored; one whose answer was
			// lost is, and the same request again replays it.
			_, err = c.Payments().Pay(ctx, payout)
			require.ErrorAs(t, err, &ferr)
			again, err := log.Clients("j1a2w2", "twice-job-1", 2, grantAll{}).Payments().Pay(ctx, payout)
			require.NoError(t, err)
			assert.Equal(t, tt.applied, again.Replayed)
		})
	}
}

func TestFateString(t *testing.T) {
	for reply, want := range map[effects.Reply]string{
		effects.Answered: "answered", effects.ReplyLost: "reply-lost", effects.Refused: "refused", effects.Reply(9): "Reply(9)",
	} {
		assert.Equal(t, want, reply.String())
	}
}

func TestErrorMessage(t *testing.T) {
	assert.Equal(t, "payment provider: the call timed out before its answer arrived (the provider may have made it)",
		(&effects.CallError{Kind: "payment", Applied: true}).Error())
	assert.Equal(t, "email provider: 503 service unavailable: the call was refused before it was made; try again",
		(&effects.CallError{Kind: "email"}).Error())
}

func TestNewLogMisuse(t *testing.T) {
	_, err := effects.NewLog(newClock().Now, effects.Providers{Payments: effects.PaymentProvider{KeyWindow: -time.Hour}})
	assert.Equal(t, "[twice] Config.Providers.Payments.KeyWindow is -1h0m0s; set how long the payment provider remembers an idempotency key, or leave it zero for Stripe's 24h", blame.Message(err))
	_, err = effects.NewLog(nil, effects.Providers{})
	require.ErrorContains(t, err, "without a clock")
}
