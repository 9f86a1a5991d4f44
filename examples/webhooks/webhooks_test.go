package webhooks_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/examples/webhooks"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
)

// config says what the merchant's endpoint is: a receiver that
// deduplicates by the Webhook-Id header, as webhook receivers do, for 24h;
// webhooks are at-least-once.
var config = harness.Config{
	Setup: []harness.Setup{harness.SQL(webhooks.Schema)},
	Providers: effects.Providers{HTTP: effects.HTTPProviders{Hosts: map[string]effects.HTTPHost{
		"hooks.merchant.example": {Kind: "webhook", KeyHeader: "Webhook-Id", Dedup: true},
	}}},
	EffectPolicies: map[string]assert.Policy{"webhook": assert.AtLeastOnce},
}

var shipped = webhooks.Shipped{OrderID: 9812, Carrier: "dhl"}

func notifier(d *harness.Delivery) webhooks.Notifier {
	return webhooks.Notifier{DB: d.DB, Client: d.HTTPClient()}
}

// Sent before it is recorded, with the event's ID from the job, checked
// for a 2xx: every default fault passes.
func TestNotify(t *testing.T) {
	harness.Check(t, harness.Job{Name: "webhook-notify", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return notifier(d).Notify(ctx, shipped)
	}}, config)
}

// Trusting a 503 as delivery loses the webhook: found by effect-failed,
// the provider's refusal, and by nothing else.
func TestNotifyIgnoringStatus(t *testing.T) {
	cfg := config
	cfg.ExpectFinding = "a 503 from the receiver counts as delivered: the webhook is never sent"
	cfg.ExpectPattern = result.EffectLost
	res := harness.Check(t, harness.Job{Name: "webhook-ignoring-status", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return notifier(d).NotifyIgnoringStatus(ctx, shipped)
	}}, cfg)
	if res.Shard != nil {
		return
	}
	missing := false
	for _, s := range res.Scenarios {
		if s.Fault == faults.NameEffectFailed {
			missing = missing || s.EffectDiff != nil && s.EffectDiff.Missing == 1
			continue
		}
		if s.Verdict != result.Idempotent {
			t.Errorf("scenario %s (%s) = %s, want only effect-failed to fail", s.Fault, s.Schedule, s.Verdict)
		}
	}
	if !missing {
		t.Errorf("effect-failed found no missing webhook")
	}
}

// A field that differs between two clean runs (a wall-clock timestamp) is
// volatile inside the request body, field by field as in state: the check
// passes, and names the field it left out.
func TestVolatileBodyField(t *testing.T) {
	job := harness.Job{Name: "webhook-with-timestamp", Handler: func(ctx context.Context, d *harness.Delivery) error {
		body := fmt.Sprintf(`{"order_id": 9812, "sent_at": %q}`, time.Now().Format(time.RFC3339Nano))
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, webhooks.Endpoint, strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Webhook-Id", "order-9812-stamped")
		resp, err := d.HTTPClient().Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		_, err = d.DB.Exec(ctx, `INSERT INTO webhooks_sent (order_id, event) VALUES (9812, 'stamped') ON CONFLICT DO NOTHING`)
		return err
	}}
	cfg := config
	cfg.Faults = []faults.Fault{faults.RunTwice()}
	res := harness.Check(t, job, cfg)
	if !slices.ContainsFunc(res.VolatileEffects, func(f string) bool { return strings.Contains(f, "sent_at") }) {
		t.Errorf("volatile effect fields = %v, want body.sent_at among them", res.VolatileEffects)
	}
	if slices.ContainsFunc(res.VolatileEffects, func(f string) bool { return strings.Contains(f, "order_id") }) {
		t.Errorf("volatile effect fields = %v, want order_id compared", res.VolatileEffects)
	}
}

// alerts says what the partner's alert endpoint is: it keeps no event
// IDs, and an alert is at most once.
var alerts = harness.Config{
	Setup: []harness.Setup{harness.SQL(webhooks.Schema)},
	Providers: effects.Providers{HTTP: effects.HTTPProviders{Hosts: map[string]effects.HTTPHost{
		"alerts.partner.example": {Kind: "alert"},
	}}},
	EffectPolicies: map[string]assert.Policy{"alert": assert.AtMostOnce},
}

func alerter(d *harness.Delivery) webhooks.Alerter {
	c := d.HTTPClient()
	c.Timeout = 10 * time.Second
	return webhooks.Alerter{DB: d.DB, Client: c}
}

// Claimed, then posted once: every default fault passes, the slow answer
// to the keyless POST included.
func TestAlert(t *testing.T) {
	res := harness.Check(t, harness.Job{Name: "alert", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return alerter(d).Alert(ctx, shipped)
	}}, alerts)
	if res.Shard == nil && !slices.ContainsFunc(res.Scenarios, func(s result.Scenario) bool { return s.Fault == faults.NameEffectSlow }) {
		t.Errorf("the default matrix gave the alert's POST no slow answer")
	}
}

// A client that retries a timed-out POST sends the alert twice: found by
// the default matrix's slow answer, the partner having taken the first
// post, and by no other fault (a cut connection is not retried).
func TestAlertRetryingTimeouts(t *testing.T) {
	cfg := alerts
	cfg.ExpectFinding = "a timed-out POST is posted again: the customer gets the alert twice"
	cfg.ExpectPattern = result.RetryWithoutKey
	res := harness.Check(t, harness.Job{Name: "alert-retrying-timeouts", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return alerter(d).AlertRetryingTimeouts(ctx, shipped)
	}}, cfg)
	if res.Shard != nil {
		return
	}
	found := false
	for _, s := range res.Scenarios {
		if s.Fault == faults.NameEffectSlow {
			found = found || s.EffectDiff != nil && s.EffectDiff.Extra == 1
			continue
		}
		if s.Verdict != result.Idempotent {
			t.Errorf("scenario %s (%s) = %s, want only effect-slow to fail", s.Fault, s.Schedule, s.Verdict)
		}
	}
	if !found {
		t.Errorf("effect-slow found no extra alert")
	}
}
