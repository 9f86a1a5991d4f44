package effects

import (
	"fmt"
	"net/http"
	"time"
)

// HTTPProviders sets up the providers behind every delivery's HTTP client
// (Providers.HTTP, Clients.HTTPClient). The zero value answers
// api.stripe.com as Stripe does and records every other host with the
// generic provider.
type HTTPProviders struct {
	// Hosts sets up the provider of a host, named as the request's URL
	// names it ("api.stripe.com", "hooks.example.com:8443").
	// api.stripe.com is the Stripe-shaped provider unless listed here;
	// any other host not listed is the generic provider.
	Hosts map[string]HTTPHost
}

// StripeHost is the host stripe-go calls, answered by the Stripe-shaped
// provider unless HTTPProviders.Hosts says otherwise.
const StripeHost = "api.stripe.com"

// DefaultKeyHeader is the header an HTTP request's idempotency key is
// read from unless HTTPHost.KeyHeader names another: Stripe's.
const DefaultKeyHeader = "Idempotency-Key"

// HTTPHost sets up the provider of one host.
type HTTPHost struct {
	// Kind is the effect kind of the host's requests, for policies
	// (assert.Policy) and reports; empty means the host itself.
	Kind string
	// KeyHeader is the header the idempotency key is read from; empty
	// means "Idempotency-Key".
	KeyHeader string
	// Stripe makes the host the Stripe-shaped provider: Stripe's
	// endpoints, bodies and idempotency keys (see StripeEndpoints).
	Stripe bool
	// Answer answers the host's requests in the generic provider; nil
	// answers 200 with an empty body. It runs once per request the
	// provider executes (not for replays), on a copy of the request.
	Answer http.Handler
	// Dedup gives the generic provider Stripe's idempotency semantics on
	// KeyHeader: a saved answer replayed with Idempotent-Replayed, 400
	// for the same key with another request, 409 while one is in flight.
	// Without it no request is deduplicated. The Stripe provider always
	// deduplicates.
	Dedup bool
	// KeyWindow is how long keys are remembered, on the harness clock;
	// zero means 24h, Stripe's window.
	KeyWindow time.Duration
}

func (p HTTPProviders) check() error {
	for host, h := range p.Hosts {
		switch {
		case host == "":
			return fmt.Errorf("[twice] Config.Providers.HTTP.Hosts has an empty host; name hosts as request URLs do (%q)", StripeHost)
		case h.Stripe && (h.Answer != nil || h.Dedup):
			return fmt.Errorf("[twice] Config.Providers.HTTP.Hosts[%q] sets Stripe and a generic provider's Answer or Dedup; the Stripe provider answers and deduplicates by itself: set one or the other", host)
		case h.KeyWindow < 0:
			return fmt.Errorf("[twice] Config.Providers.HTTP.Hosts[%q].KeyWindow is %v; set how long keys are remembered, or leave it zero for 24h", host, h.KeyWindow)
		}
	}
	return nil
}

// host returns the setting of host, the defaults filled in.
func (p HTTPProviders) host(host string) HTTPHost {
	h, ok := p.Hosts[host]
	if !ok && host == StripeHost {
		h.Stripe = true
	}
	if h.Kind == "" {
		h.Kind = host
	}
	if h.KeyHeader == "" {
		h.KeyHeader = DefaultKeyHeader
	}
	return h
}
