package webhooks_test

import (
	"context"
	"testing"

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
