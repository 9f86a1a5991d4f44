package harness

import (
	"context"
	"net/http"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
)

// Mail returns the delivery's mail sender (package effects). Its emails go
// to the scenario's effect log, where the oracle compares them with one
// clean run's.
func (d *Delivery) Mail() *effects.Mailer { return d.fakes().Mail() }

// Payments returns the delivery's payment provider, with Stripe's
// idempotency keys (package effects). Its payments go to the scenario's
// effect log, where the oracle compares them with one clean run's.
func (d *Delivery) Payments() *effects.Payments { return d.fakes().Payments() }

// Effect makes a call to a system outside the database (the user's own
// SMS, push or webhook client) a recorded effect: the harness records it
// in the scenario's effect log, where the oracle judges it by its kind's
// policy (assert.Policy), and treats it as a step of the delivery, so a
// fault can kill the delivery just before the call or right after the
// provider accepted it.
//
// kind names the kind of effect ("sms") for policies and reports. key is
// the idempotency key the call sends, or empty; it is printed, not
// compared. payload is what the call asks for, as plain data that
// encoding/json can encode; two effects with the same kind and payload are
// the same effect, so put in it what makes the effect itself, and
// nothing that changes between runs of a correct handler (a timestamp, a
// random ID). call makes the real call; an error from it means the effect
// did not happen and is returned as it is.
//
// When the delivery is dead (a fault killed it) Effect returns an error
// without calling call, and nothing is recorded. Under an effect fault
// it returns an *effects.Error: after calling call when the provider's
// answer was lost (the effect counts as made), without calling it when
// the provider refused.
//
// To check a handler that takes a client interface, hand it a wrapper that
// sends every call through Effect and on to a fake or a sandbox client:
//
//	type recordedSMS struct {
//		d    *harness.Delivery
//		next SMSClient
//	}
//
//	func (s recordedSMS) Send(ctx context.Context, to, text string) error {
//		return s.d.Effect(ctx, "sms", "", map[string]string{"to": to, "text": text},
//			func(ctx context.Context) error { return s.next.Send(ctx, to, text) })
//	}
func (d *Delivery) Effect(ctx context.Context, kind, key string, payload any, call func(ctx context.Context) error) error {
	return d.fakes().Record(ctx, kind, key, payload, call)
}

// fakes returns d's effect clients, or nil for a Delivery the harness did
// not make, whose clients answer every call with an error saying so.
func (d *Delivery) fakes() *effects.Clients {
	if d == nil {
		return nil
	}
	return d.fx
}

// effectWindows says which differences in effects a scenario made
// unavoidable, for assert.EffectOptions. overlapped: some of its
// deliveries ran at once. faulted: the labels of the deliveries a crash or
// an ambiguous fault actually hit. log: the scenario's effects.
//
// A duplicate is unavoidable where deliveries overlapped or a faulted
// delivery had made an effect before the fault: its record of the effect
// may have died with it. A missing effect is unavoidable where any
// delivery was faulted: it may have recorded its intent and died before
// the effect. A lost ack makes neither: the delivery finished cleanly.
func effectWindows(overlapped bool, faulted map[string]bool, log []assert.Effect) (duplicates, missing bool) {
	duplicates = overlapped
	for _, e := range log {
		if e.Happened() && faulted[e.Delivery] {
			duplicates = true
		}
	}
	return duplicates, len(faulted) > 0
}

// oneJob reports whether the effects that happened in log were all made
// by deliveries of one job of the schedule: no producer's copy made one,
// even one that reached the queue with the original's ID (a task ID
// free again once its retention ended).
func oneJob(log []assert.Effect, deliveries []result.DeliveryOutcome) bool {
	job := 0
	for _, e := range log {
		if !e.Happened() {
			continue
		}
		for _, d := range deliveries {
			if d.Delivery.Label() != e.Delivery {
				continue
			}
			if job != 0 && d.Delivery.Job != job {
				return false
			}
			job = d.Delivery.Job
		}
	}
	return true
}

// HTTPClient returns the delivery's HTTP client (package effects): hand it
// to the SDK or code that makes HTTP calls, where production passes its
// own (stripe-go's BackendConfig.HTTPClient, an AWS SDK's HTTPClient
// option). Whatever host a request names it reaches, through a real
// net/http Transport, the scenario's provider of that host
// (Config.Providers.HTTP: api.stripe.com is Stripe-shaped, any other host
// generic), and every attempt, an SDK's own retries included, is a step
// of the delivery and, unless it only reads (GET), an effect: kind from
// the host, key from the Idempotency-Key header, payload the method, path
// and canonical body. A
// dead delivery's requests fail and are not recorded.
func (d *Delivery) HTTPClient() *http.Client { return d.fakes().HTTPClient() }

// HTTPBaseURL returns a base URL that reaches host's provider through
// HTTPClient, for an SDK that wants a URL of its own; most do not need
// it, since HTTPClient routes every host.
func (d *Delivery) HTTPBaseURL(host string) string { return d.fakes().HTTPBaseURL(host) }

// SMTPAddr returns the address ("127.0.0.1:41873") of the delivery's SMTP
// sink: point the job's own SMTP client at it where production points it
// at its relay, and every message it sends is an email effect of this
// delivery, recorded in the scenario's effect log (no deduplication, as
// a relay does none). With net/smtp:
//
//	addr := d.SMTPAddr()
//	host, _, _ := net.SplitHostPort(addr) // "127.0.0.1"
//	auth := smtp.PlainAuth("", "user", "secret", host)
//	err := smtp.SendMail(addr, auth, from, to, msg)
//
// The sink offers AUTH PLAIN without TLS and takes any credentials;
// PlainAuth agrees to that only for a host of 127.0.0.1 (or localhost)
// equal to the one dialled, which the address gives. The end of each
// message's DATA is a step of the delivery, so the default fault matrix
// covers every message as it covers every effect: a crash just before or
// right after it, a lost reply (the message was sent; the sink cuts the
// connection instead of answering), a refusal ("451 4.3.0", not sent).
// A dead delivery's messages and sessions are refused and not recorded.
// The sink is started on the first call and stopped when the scenario
// ends. See effects.SMTPMessage for what is compared.
func (d *Delivery) SMTPAddr() string { return d.fakes().SMTPAddr() }
