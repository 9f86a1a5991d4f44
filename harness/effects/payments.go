package effects

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/internal/blame"
)

// PaymentRequest asks the payment fake to move money. It is the effect's
// payload, kind "payment", with IdempotencyKey as the effect's key.
type PaymentRequest struct {
	// IdempotencyKey deduplicates the request, as Stripe's
	// Idempotency-Key header does; empty means none. Build it from the
	// job ("payout-restaurant-381-2026-W42"), never from the attempt: a
	// random key made inside the job is new on every retry and protects
	// nothing.
	IdempotencyKey string
	Destination    string // who is paid: "acct_381"
	Amount         int64  // in the currency's smallest unit
	Currency       string // "eur"
}

// DeclinedDestination is a destination the payment fake always declines,
// like Stripe's test cards: the decline is stored under the request's
// idempotency key and replayed with it.
const DeclinedDestination = "acct_declined"

// Payment is a payment the fake made.
type Payment struct {
	ID string // "py_1", unique in the scenario
	// Destination, Amount and Currency are the request's.
	Destination string
	Amount      int64
	Currency    string
	// Created is the harness time the payment was made.
	Created time.Time
	// Replayed is true when the answer came from the idempotency store, as
	// Stripe's Idempotent-Replayed header says: no money moved this time.
	Replayed bool
}

// PaymentError is the payment fake's refusal, shaped like Stripe's errors.
type PaymentError struct {
	// Status is the HTTP status Stripe would answer: 400 for invalid or
	// mismatched parameters, 402 for a decline, 409 for a request whose
	// key is in use by one still in flight.
	Status int
	// Code is Stripe's error code: "parameter_invalid",
	// "idempotency_error", "card_declined",
	// "idempotency_key_in_use".
	Code string
	// Message says what was wrong, as Stripe's does.
	Message string
	// Replayed is true when the error was stored under the idempotency
	// key by an earlier request and answered again.
	Replayed bool
}

// Error reads like Stripe's answer: "payments: 402 card_declined:
// ...".
func (e *PaymentError) Error() string {
	s := fmt.Sprintf("payments: %d %s: %s", e.Status, e.Code, e.Message)
	if e.Replayed {
		s += " (replayed from the idempotency key)"
	}
	return s
}

// Payments is a payment provider with Stripe's idempotency-key semantics,
// shared by every delivery of a scenario, as the real provider would be:
//
//   - a request with a key the provider remembers and the same parameters
//     gets the stored answer, a payment or an error, and no money moves;
//   - the same key with other parameters is an error (400);
//   - a request whose key is in use by one still in flight is a conflict
//     (409);
//   - a key is remembered for a window on the harness clock
//     (PaymentProvider.KeyWindow, 24h unless set); reused after it, it
//     makes a new payment;
//   - a request without a key is never deduplicated;
//   - requests with invalid parameters are refused (400) and, as they
//     never ran, not stored under their key; nor is a request the
//     provider refused as unavailable (503, faults.KindEffectFailed);
//   - a request whose answer was lost on the way back (a timeout,
//     faults.KindEffectLostReply) ran and is stored: a retry with the
//     same key and parameters gets the stored payment.
//
// A handler gets it from harness.Delivery.Payments.
type Payments struct {
	c *Clients
}

// Pay makes a payment. The call is a step of the delivery: a fault can
// kill the delivery just before it, and then nothing is paid, or right
// after the provider accepted it. A refusal is a *PaymentError.
//
// Under an effect fault Pay returns a *CallError and the delivery
// goes on. When the provider's answer was lost (a timeout), the payment
// was made and its answer stored under the idempotency key: the same
// request again gets it back, Replayed, and no money moves. When the
// provider refused the call (a 503), nothing was paid or stored, and the
// same request again pays.
func (p *Payments) Pay(ctx context.Context, req PaymentRequest) (Payment, error) {
	if p == nil || p.c == nil {
		return Payment{}, errNoFakes("Payments.Pay")
	}
	raw, err := json.Marshal(paymentPayload{Destination: req.Destination, Amount: req.Amount, Currency: req.Currency})
	if err != nil {
		err = fmt.Errorf("encoding a payment: %w", err)
		p.c.log.fail(err)
		return Payment{}, err
	}
	var pay Payment
	err = p.c.call(ctx, assert.Effect{Kind: KindPayment, Key: req.IdempotencyKey, Payload: raw}, func() (string, bool, error) {
		var perr *PaymentError
		pay, perr = p.c.log.payments.pay(req, p.c.log.now)
		if perr != nil {
			return "", perr.Replayed, perr
		}
		return pay.ID, pay.Replayed, nil
	})
	if err != nil {
		return Payment{}, err
	}
	return pay, nil
}

// paymentPayload is what a payment effect records and compares.
type paymentPayload struct {
	Destination string `json:"destination"`
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
}

// PaymentProvider sets up the payment provider each scenario gets afresh
// (Providers.Payments). The zero value behaves as Stripe does.
type PaymentProvider struct {
	// KeyWindow is how long the provider remembers an idempotency key, on
	// the harness clock; zero means 24h, Stripe's window. A key reused
	// after it makes a new payment, so a job redriven days later pays
	// twice however well it builds its key (the redrive fault moves the
	// clock 72h). Set it to the window of the provider the job really
	// calls; KeepKeys for one that remembers keys for good.
	KeyWindow time.Duration
}

// DefaultKeyWindow is how long the payment provider remembers an
// idempotency key when PaymentProvider.KeyWindow is zero: Stripe's 24h.
const DefaultKeyWindow = 24 * time.Hour

// KeepKeys is a KeyWindow that never ends: a provider that remembers its
// idempotency keys for good (PaymentProvider.KeyWindow,
// HTTPHost.KeyWindow).
const KeepKeys = time.Duration(math.MaxInt64)

func (p PaymentProvider) check() error {
	if p.KeyWindow < 0 {
		return blame.Userf("Config.Providers.Payments.KeyWindow is %v; set how long the payment provider remembers an idempotency key, or leave it zero for Stripe's 24h", p.KeyWindow)
	}
	return nil
}

// store returns the provider's empty memory.
func (p PaymentProvider) store() *paymentStore {
	return &paymentStore{keys: newKeyStore[PaymentRequest, paymentAnswer](p.KeyWindow)}
}

// paymentStore is the provider's memory: its payments and idempotency keys.
type paymentStore struct {
	keys *keyStore[PaymentRequest, paymentAnswer]

	mu   sync.Mutex
	made int // payments made, for IDs

	// executing, when set, runs while a request executes, its key in
	// flight; tests block in it to make a concurrent request.
	executing func(PaymentRequest)
}

// paymentAnswer is what the provider saves under an idempotency key.
type paymentAnswer struct {
	payment Payment
	err     *PaymentError
}

// maxKeyLen is Stripe's limit on idempotency keys.
const maxKeyLen = 255

func (s *paymentStore) pay(req PaymentRequest, now func() time.Time) (Payment, *PaymentError) {
	if err := validPayment(req); err != nil {
		return Payment{}, err
	}
	if req.IdempotencyKey == "" {
		return s.execute(req, now)
	}
	verdict, saved, first := s.keys.claim(req.IdempotencyKey, req, now())
	switch verdict {
	case keyInFlight:
		return Payment{}, &PaymentError{Status: 409, Code: "idempotency_key_in_use",
			Message: fmt.Sprintf("there is currently another in-progress request using the idempotency key %q; retry later", req.IdempotencyKey)}
	case keyMismatch:
		return Payment{}, &PaymentError{Status: 400, Code: "idempotency_error",
			Message: fmt.Sprintf("keys for idempotent requests can only be used with the same parameters they were first used with: key %q was used for %s and now for %s", req.IdempotencyKey, describe(first), describe(req))}
	case keyReplay:
		if saved.err != nil {
			replayed := *saved.err
			replayed.Replayed = true
			return Payment{}, &replayed
		}
		pay := saved.payment
		pay.Replayed = true
		return pay, nil
	}
	pay, err := s.execute(req, now)
	s.keys.settle(req.IdempotencyKey, paymentAnswer{payment: pay, err: err})
	return pay, err
}

// execute moves the money, or declines.
func (s *paymentStore) execute(req PaymentRequest, now func() time.Time) (Payment, *PaymentError) {
	if s.executing != nil {
		s.executing(req)
	}
	if req.Destination == DeclinedDestination {
		return Payment{}, &PaymentError{Status: 402, Code: "card_declined", Message: fmt.Sprintf("the payment to %s was declined", req.Destination)}
	}
	s.mu.Lock()
	s.made++
	id := fmt.Sprintf("py_%d", s.made)
	s.mu.Unlock()
	return Payment{ID: id, Destination: req.Destination, Amount: req.Amount, Currency: req.Currency, Created: now()}, nil
}

// validPayment refuses what Stripe refuses before running a request.
func validPayment(req PaymentRequest) *PaymentError {
	invalid := func(msg string) *PaymentError {
		return &PaymentError{Status: 400, Code: "parameter_invalid", Message: msg}
	}
	switch {
	case req.Destination == "":
		return invalid("the destination is empty")
	case req.Amount <= 0:
		return invalid(fmt.Sprintf("the amount must be positive, not %d", req.Amount))
	case req.Currency == "":
		return invalid("the currency is empty")
	case len(req.IdempotencyKey) > maxKeyLen:
		return invalid(fmt.Sprintf("the idempotency key is %d bytes long; at most %d are allowed", len(req.IdempotencyKey), maxKeyLen))
	}
	return nil
}

func describe(r PaymentRequest) string {
	return fmt.Sprintf("%d %s to %s", r.Amount, r.Currency, r.Destination)
}
