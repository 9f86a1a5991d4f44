package stripepayout_test

import (
	"context"
	"strings"
	"testing"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/examples/stripepayout"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
)

// billingConfig: Ana's business plan, paid for 5 December - 4 January
// by a charge Stripe holds (seeded), cancelled on 28 December; the job
// runs on 1 January (the harness clock). And her invoice, a draft at
// Stripe.
var billingConfig = harness.Config{
	Setup: []harness.Setup{harness.SQL(stripepayout.RefundSchema + `
INSERT INTO subscriptions (id, charge_id, period_start, period_end, cancel_requested_at)
VALUES ('sub_ana_monthly', 'ch_sub_ana_dec', '2025-12-05 00:00+00', '2026-01-04 00:00+00', '2025-12-28 08:00+00');`)},
	Providers: seededProviders(),
}

func billing(d *harness.Delivery) stripepayout.Billing {
	return stripepayout.Billing{DB: d.DB, Stripe: stripeClient(d.HTTPClient()), Now: d.Now}
}

// Prorated when it runs, the refund asks for another amount on every
// retry, under the same key: Stripe answers the crashed delivery's retry
// with idempotency_error, and the job never completes.
func TestRefundProratedWhenItRuns(t *testing.T) {
	cfg := billingConfig
	cfg.Faults = []faults.Fault{faults.CrashAtEveryStep()}
	res, err := harness.Run(context.Background(), harness.Job{Name: "refund-unused", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return billing(d).RefundUnused(ctx, "sub_ana_monthly")
	}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	if res.Idempotent() {
		t.Fatalf("the prorated refund passed crash-mid-job:\n%s", res)
	}
	keyError := false
	for _, s := range res.Scenarios {
		for _, d := range s.Deliveries[1:] {
			keyError = keyError || containsAll(d.Err, "idempotency_error", "refunding")
		}
	}
	if !keyError {
		t.Errorf("no retry met Stripe's idempotency_error:\n%s", res)
	}
}

// Prorated to the moment the customer asked, every retry asks for the
// same amount and Stripe answers it from the key: only the redrive past
// the key window refunds twice.
func TestRefundProratedAtRequest(t *testing.T) {
	cfg := billingConfig
	cfg.ExpectFinding = "a redrive after Stripe's 24h key window refunds twice"
	cfg.ExpectPattern = result.KeyWindowPassed
	res := harness.Check(t, harness.Job{Name: "refund-unused-at-request", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return billing(d).RefundUnusedAtRequest(ctx, "sub_ana_monthly")
	}}, cfg)
	if res.Shard != nil {
		return
	}
	for _, s := range res.Scenarios {
		if s.Fault != faults.NameRedrive && s.Verdict != result.Idempotent {
			t.Errorf("scenario %s (%s) = %s, want only redrives to fail", s.Fault, s.Schedule, s.Verdict)
		}
	}
}

// Sending the invoice, then recording it, is at least once: a delivery
// that dies between the two sends it again, which the policy allows.
func TestSendInvoiceAtLeastOnce(t *testing.T) {
	cfg := billingConfig
	cfg.EffectPolicies = map[string]assert.Policy{effects.StripeHost: assert.AtLeastOnce}
	res := harness.Check(t, harness.Job{Name: "send-invoice", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return billing(d).SendInvoice(ctx, "in_ana_w42")
	}}, cfg)
	if res.Shard == nil && len(res.ReferenceEffects) != 1 {
		t.Errorf("the clean run made %d effects, want the invoice sent once: %v", len(res.ReferenceEffects), res.ReferenceEffects)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
