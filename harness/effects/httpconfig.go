package effects

import (
	"net/http"
	"time"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/text"
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
	// StripeObjects are the objects the Stripe-shaped provider holds
	// when each scenario (and each clean run) starts, by ID: the charge
	// a job refunds, the invoice it sends, the customer or subscription
	// it reads. An ID starts with its object's prefix ("ch_seed_9812",
	// "in_week42", "cus_", "pi_", "re_", "tr_", "po_", "sub_"); the
	// fields are Stripe's ("amount", "currency", "customer", "status").
	// A refund is checked against its charge's amount and earlier
	// refunds; an invoice's finalize, send and pay follow its status.
	StripeObjects map[string]map[string]any
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
	// zero means 24h, Stripe's window; KeepKeys, for good.
	KeyWindow time.Duration
	// Refusal is how the host refuses a call under an effect-failed
	// fault (faults.KindEffectFailed); the zero value is as the provider
	// does it.
	Refusal HTTPRefusal
}

// HTTPRefusal is how a host refuses a call under an effect-failed fault.
// Clients tell refusals apart: stripe-go retries a 503 without Stripe's
// JSON body within the call, with the same key, but not a 429 rate_limit,
// which reaches the handler.
type HTTPRefusal int

const (
	// RefuseAsProvider refuses as the host's provider does: on a Stripe
	// host RefuseRateLimit, on any other RefuseUnavailable.
	RefuseAsProvider HTTPRefusal = iota
	// RefuseRateLimit answers 429 with Retry-After: 1; on a Stripe host
	// with Stripe's JSON error (type invalid_request_error, code
	// rate_limit), elsewhere in plain text.
	RefuseRateLimit
	// RefuseUnavailable answers 503 with Retry-After: 1 and a plain-text
	// body, as a load balancer in front of the provider does, also on a
	// Stripe host.
	RefuseUnavailable
)

var refusalNames = [...]string{RefuseAsProvider: "as-provider", RefuseRateLimit: "429 rate limit", RefuseUnavailable: "503 unavailable"}

// String names the refusal: "as-provider", "429 rate limit", "503
// unavailable".
func (r HTTPRefusal) String() string {
	return text.Name(refusalNames[:], r, "HTTPRefusal")
}

func (p HTTPProviders) check() error {
	for host, h := range p.Hosts {
		if err := checkStripeObjects(host, h.StripeObjects); err != nil {
			return err
		}
		switch {
		case host == "":
			return blame.Userf("Config.Providers.HTTP.Hosts has an empty host; name hosts as request URLs do (%q)", StripeHost)
		case h.Stripe && (h.Answer != nil || h.Dedup):
			return blame.Userf("Config.Providers.HTTP.Hosts[%q] sets Stripe and a generic provider's Answer or Dedup; the Stripe provider answers and deduplicates by itself: set one or the other", host)
		case h.Refusal < RefuseAsProvider || h.Refusal > RefuseUnavailable:
			return blame.Userf("Config.Providers.HTTP.Hosts[%q].Refusal is %v; set effects.RefuseRateLimit, effects.RefuseUnavailable, or leave it zero for the provider's own", host, h.Refusal)
		case len(h.StripeObjects) > 0 && !h.Stripe:
			return blame.Userf("Config.Providers.HTTP.Hosts[%q] sets StripeObjects on a host that is not the Stripe-shaped provider; set Stripe: true", host)
		case h.KeyWindow < 0:
			return blame.Userf("Config.Providers.HTTP.Hosts[%q].KeyWindow is %v; set how long keys are remembered, or leave it zero for 24h", host, h.KeyWindow)
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
	if h.Refusal == RefuseAsProvider {
		h.Refusal = RefuseUnavailable
		if h.Stripe {
			h.Refusal = RefuseRateLimit
		}
	}
	return h
}
