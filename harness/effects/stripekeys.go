package effects

import (
	"sync"
	"time"
)

// keyStore is a provider's memory of idempotency keys with Stripe's
// semantics, shared by the payment fake (params: a PaymentRequest) and the
// Stripe-shaped HTTP provider (params: method, path and canonical body):
// the first request's answer is saved under its key, failures included,
// and replayed to a later request with the same key and params; the same
// key with other params is a mismatch; a key whose request still runs is
// in flight; a key is forgotten once window has passed on the harness
// clock.
type keyStore[P comparable, A any] struct {
	window time.Duration

	mu   sync.Mutex
	keys map[string]*keyRecord[P, A]
}

func newKeyStore[P comparable, A any](window time.Duration) *keyStore[P, A] {
	if window == 0 {
		window = DefaultKeyWindow
	}
	return &keyStore[P, A]{window: window, keys: map[string]*keyRecord[P, A]{}}
}

// keyRecord is what the provider remembers under one idempotency key.
type keyRecord[P comparable, A any] struct {
	params   P
	created  time.Time
	inFlight bool
	answer   A
}

// keyVerdict is what claim found under a key.
type keyVerdict int

const (
	keyNew      keyVerdict = iota // the caller runs the request and settles the key
	keyReplay                     // answer is the saved one
	keyInFlight                   // another request with the key still runs: 409
	keyMismatch                   // the key was used with other params: first holds them
)

// claim looks key up at harness time at. On keyNew the key is held in
// flight until settle or forget; on keyReplay answer is the saved answer;
// on keyMismatch first is what the key was first used with.
func (s *keyStore[P, A]) claim(key string, params P, at time.Time) (v keyVerdict, answer A, first P) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.keys[key]
	if rec != nil && !rec.inFlight && at.Sub(rec.created) >= s.window {
		delete(s.keys, key)
		rec = nil
	}
	switch {
	case rec == nil:
		s.keys[key] = &keyRecord[P, A]{params: params, created: at, inFlight: true}
		return keyNew, answer, first
	case rec.inFlight:
		return keyInFlight, answer, first
	case rec.params != params:
		return keyMismatch, answer, rec.params
	}
	return keyReplay, rec.answer, first
}

// settle saves the answer of the request that claimed key.
func (s *keyStore[P, A]) settle(key string, answer A) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec := s.keys[key]; rec != nil {
		rec.inFlight, rec.answer = false, answer
	}
}

// forget drops a key whose request never started executing, as Stripe
// saves no result for it.
func (s *keyStore[P, A]) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, key)
}
