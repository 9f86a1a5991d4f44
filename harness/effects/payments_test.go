package effects_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/harness/effects"
)

var payout = effects.PaymentRequest{IdempotencyKey: "payout-restaurant-381-2026-W42", Destination: "acct_381", Amount: 5000, Currency: "eur"}

// paymentError returns err's *effects.PaymentError, failing t when it is not one.
func paymentError(t *testing.T, err error) *effects.PaymentError {
	t.Helper()
	var perr *effects.PaymentError
	require.ErrorAs(t, err, &perr)
	assert.True(t, strings.HasPrefix(err.Error(), "payments: "), err.Error())
	return perr
}

// happened counts the payments that moved money.
func happened(log *effects.Log) int {
	n := 0
	for _, e := range log.Effects() {
		if e.Kind == "payment" && e.Happened() {
			n++
		}
	}
	return n
}

func TestPaymentsSameKeySameParametersReplays(t *testing.T) {
	log := newLog(t, newClock(), 0)
	ctx := context.Background()
	first, err := log.Clients("j1a1w1", "twice-job-1", 1, grantAll{}).Payments().Pay(ctx, payout)
	require.NoError(t, err)
	again, err := log.Clients("j1a2w2", "twice-job-1", 2, grantAll{}).Payments().Pay(ctx, payout)
	require.NoError(t, err)

	assert.False(t, first.Replayed)
	assert.True(t, again.Replayed)
	again.Replayed = false
	assert.Equal(t, first, again, "the stored payment is answered again")
	assert.Equal(t, 1, happened(log))
	got := log.Effects()
	require.Len(t, got, 2)
	assert.Equal(t, first.ID, got[0].Result)
	assert.Equal(t, payout.IdempotencyKey, got[1].Key)
	assert.True(t, got[1].Replayed)
	assert.Equal(t, "j1a2w2", got[1].Delivery, "the replay is attributed to the delivery that asked")
}

func TestPaymentsSameKeyOtherParametersIsAnError(t *testing.T) {
	for _, change := range []struct {
		name string
		req  func(effects.PaymentRequest) effects.PaymentRequest
	}{
		{"amount", func(r effects.PaymentRequest) effects.PaymentRequest { r.Amount++; return r }},
		{"currency", func(r effects.PaymentRequest) effects.PaymentRequest { r.Currency = "usd"; return r }},
		{"destination", func(r effects.PaymentRequest) effects.PaymentRequest { r.Destination = "acct_382"; return r }},
	} {
		t.Run(change.name, func(t *testing.T) {
			log := newLog(t, newClock(), 0)
			p := log.Clients("j1a1w1", "twice-job-1", 1, grantAll{}).Payments()
			ctx := context.Background()
			_, err := p.Pay(ctx, payout)
			require.NoError(t, err)
			pay, err := p.Pay(ctx, change.req(payout))
			perr := paymentError(t, err)
			assert.Equal(t, 400, perr.Status)
			assert.Equal(t, "idempotency_error", perr.Code)
			assert.Contains(t, perr.Message, "same parameters")
			assert.Zero(t, pay)
			assert.Equal(t, 1, happened(log))

			// The stored payment is untouched by the refused request.
			pay, err = p.Pay(ctx, payout)
			require.NoError(t, err)
			assert.True(t, pay.Replayed)
		})
	}
}

func TestPaymentsStoredErrorIsReplayed(t *testing.T) {
	log := newLog(t, newClock(), 0)
	p := log.Clients("j1a1w1", "twice-job-1", 1, grantAll{}).Payments()
	ctx := context.Background()
	declined := effects.PaymentRequest{IdempotencyKey: "payout-9", Destination: effects.DeclinedDestination, Amount: 100, Currency: "eur"}

	_, err := p.Pay(ctx, declined)
	first := paymentError(t, err)
	assert.Equal(t, 402, first.Status)
	assert.Equal(t, "card_declined", first.Code)
	assert.False(t, first.Replayed)

	_, err = p.Pay(ctx, declined)
	again := paymentError(t, err)
	assert.True(t, again.Replayed)
	again.Replayed = false
	assert.Equal(t, first, again, "the stored decline is answered again")

	_, err = p.Pay(ctx, effects.PaymentRequest{IdempotencyKey: "payout-9", Destination: "acct_9", Amount: 100, Currency: "eur"})
	assert.Equal(t, "idempotency_error", paymentError(t, err).Code, "a stored decline still binds the key to its parameters")

	assert.Equal(t, 0, happened(log))
	got := log.Effects()
	require.Len(t, got, 3)
	assert.Contains(t, got[1].Err, "card_declined")
	assert.True(t, got[1].Replayed)
}

// Stripe stores nothing for a request refused before it ran, so a retry
// with the parameters fixed goes through.
func TestPaymentsInvalidRequestIsNotStored(t *testing.T) {
	log := newLog(t, newClock(), 0)
	p := log.Clients("j1a1w1", "twice-job-1", 1, grantAll{}).Payments()
	ctx := context.Background()
	tests := []struct {
		name string
		req  effects.PaymentRequest
		want string
	}{
		{"no destination", effects.PaymentRequest{IdempotencyKey: "k", Amount: 1, Currency: "eur"}, "destination is empty"},
		{"zero amount", effects.PaymentRequest{IdempotencyKey: "k", Destination: "acct_1", Currency: "eur"}, "amount must be positive, not 0"},
		{"negative amount", effects.PaymentRequest{IdempotencyKey: "k", Destination: "acct_1", Amount: -5, Currency: "eur"}, "not -5"},
		{"no currency", effects.PaymentRequest{IdempotencyKey: "k", Destination: "acct_1", Amount: 1}, "currency is empty"},
		{"key too long", effects.PaymentRequest{IdempotencyKey: strings.Repeat("k", 256), Destination: "acct_1", Amount: 1, Currency: "eur"}, "256 bytes long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.Pay(ctx, tt.req)
			perr := paymentError(t, err)
			assert.Equal(t, 400, perr.Status)
			assert.Equal(t, "parameter_invalid", perr.Code)
			assert.Contains(t, perr.Message, tt.want)
		})
	}
	pay, err := p.Pay(ctx, effects.PaymentRequest{IdempotencyKey: "k", Destination: "acct_1", Amount: 1, Currency: "eur"})
	require.NoError(t, err)
	assert.False(t, pay.Replayed)
	assert.Equal(t, 1, happened(log))
}

// A request whose key is in use by one still executing is a conflict; the
// first is held in flight by the provider's hook, so no timing is involved.
func TestPaymentsConcurrentSameKeyConflicts(t *testing.T) {
	log := newLog(t, newClock(), 0)
	inFlight, release := make(chan struct{}), make(chan struct{})
	effects.SetExecuting(log, func(effects.PaymentRequest) {
		close(inFlight)
		<-release
	})
	ctx := context.Background()
	type answer struct {
		pay effects.Payment
		err error
	}
	firstDone := make(chan answer)
	go func() {
		pay, err := log.Clients("j1a1w1", "twice-job-1", 1, grantAll{}).Payments().Pay(ctx, payout)
		firstDone <- answer{pay, err}
	}()
	<-inFlight
	effects.SetExecuting(log, nil) // the first request has read it; later ones run straight through

	overlap := log.Clients("j1a2w2", "twice-job-1", 2, grantAll{}).Payments()
	_, err := overlap.Pay(ctx, payout)
	perr := paymentError(t, err)
	assert.Equal(t, 409, perr.Status)
	assert.Equal(t, "idempotency_key_in_use", perr.Code)
	_, err = overlap.Pay(ctx, effects.PaymentRequest{IdempotencyKey: payout.IdempotencyKey, Destination: "acct_382", Amount: 1, Currency: "eur"})
	assert.Equal(t, "idempotency_key_in_use", paymentError(t, err).Code, "in flight wins over a parameter mismatch")
	other, err := overlap.Pay(ctx, effects.PaymentRequest{IdempotencyKey: "another-key", Destination: "acct_382", Amount: 1, Currency: "eur"})
	require.NoError(t, err, "other keys are not blocked")
	assert.False(t, other.Replayed)

	close(release)
	first := <-firstDone
	require.NoError(t, first.err)
	assert.False(t, first.pay.Replayed)

	after, err := overlap.Pay(ctx, payout)
	require.NoError(t, err)
	assert.True(t, after.Replayed, "once the first has finished, the key replays")
	assert.Equal(t, first.pay.ID, after.ID)
	assert.Equal(t, 2, happened(log))
}

func TestPaymentsKeyExpires(t *testing.T) {
	tests := []struct {
		name     string
		window   time.Duration // passed to newEffectLog
		advance  time.Duration
		replayed bool
	}{
		{"default window, just inside", 0, 24*time.Hour - time.Minute, true},
		{"default window, past it", 0, 24 * time.Hour, false},
		{"redrive days later", 0, 72 * time.Hour, false},
		{"one hour window, inside", time.Hour, 59 * time.Minute, true},
		{"one hour window, past it", time.Hour, time.Hour, false},
		{"window longer than the default", 7 * 24 * time.Hour, 72 * time.Hour, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newClock()
			log := newLog(t, clock, tt.window)
			ctx := context.Background()
			first, err := log.Clients("j1a1w1", "twice-job-1", 1, grantAll{}).Payments().Pay(ctx, payout)
			require.NoError(t, err)
			clock.Advance(tt.advance)
			again, err := log.Clients("j1a2w2", "twice-job-1", 2, grantAll{}).Payments().Pay(ctx, payout)
			require.NoError(t, err)
			assert.Equal(t, tt.replayed, again.Replayed)
			if tt.replayed {
				assert.Equal(t, first.ID, again.ID)
				assert.Equal(t, 1, happened(log))
				return
			}
			assert.NotEqual(t, first.ID, again.ID, "a key reused after the window makes a new payment")
			assert.Equal(t, 2, happened(log))
			assert.GreaterOrEqual(t, again.Created.Sub(first.Created), tt.advance)

			// The reuse starts a new window.
			third, err := log.Clients("j1a3w3", "twice-job-1", 3, grantAll{}).Payments().Pay(ctx, payout)
			require.NoError(t, err)
			assert.True(t, third.Replayed)
			assert.Equal(t, again.ID, third.ID)
		})
	}
}

func TestPaymentsEmptyKeyIsNotDeduplicated(t *testing.T) {
	log := newLog(t, newClock(), 0)
	p := log.Clients("j1a1w1", "twice-job-1", 1, grantAll{}).Payments()
	req := payout
	req.IdempotencyKey = ""
	a, err := p.Pay(context.Background(), req)
	require.NoError(t, err)
	b, err := p.Pay(context.Background(), req)
	require.NoError(t, err)
	assert.NotEqual(t, a.ID, b.ID)
	assert.False(t, b.Replayed)
	assert.Equal(t, 2, happened(log))
}

func TestPaymentErrorMessage(t *testing.T) {
	busy := &effects.PaymentError{Status: 409, Code: "idempotency_key_in_use", Message: "busy"}
	assert.Equal(t, "payments: 409 idempotency_key_in_use: busy", busy.Error())
	declined := &effects.PaymentError{Status: 402, Code: "card_declined", Message: "declined", Replayed: true}
	assert.Equal(t, "payments: 402 card_declined: declined (replayed from the idempotency key)", declined.Error())
}

// A provider with KeepKeys remembers a key for good: the same payment
// asked again ten years on is answered from it.
func TestPaymentsKeepKeys(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 10, 12, 9, 0, 0, 0, time.UTC)
	log, err := effects.NewLog(func() time.Time { return at }, effects.Providers{Payments: effects.PaymentProvider{KeyWindow: effects.KeepKeys}})
	require.NoError(t, err)
	first, err := log.Clients("j1a1w1", "twice-job-1", 1, grantAll{}).Payments().Pay(ctx, payout)
	require.NoError(t, err)
	at = at.AddDate(10, 0, 0)
	again, err := log.Clients("j1a2w2", "twice-job-1", 2, grantAll{}).Payments().Pay(ctx, payout)
	require.NoError(t, err)
	assert.Equal(t, first.ID, again.ID)
	assert.Equal(t, 1, happened(log))
}
