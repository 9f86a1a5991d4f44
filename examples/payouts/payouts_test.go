package payouts_test

import (
	"context"
	"testing"
	"time"

	"github.com/runtwice/twice/examples/payouts"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
)

var (
	config = harness.Config{Setup: []harness.Setup{harness.SQL(payouts.Schema)}}
	week42 = payouts.Payout{RestaurantID: 381, Week: "2026-W42", AmountPaise: 84_000_00}

	withJobKey = harness.Job{Name: "payout-with-job-key", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return payoutJob(d).WithJobKey(ctx, week42)
	}}
	withRandomKey = harness.Job{Name: "payout-with-random-key", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return payoutJob(d).WithRandomKey(ctx, week42)
	}}
)

// payoutJob wires the job to the delivery's pool and its payment fake, where
// production passes its pool and the provider's client.
func payoutJob(d *harness.Delivery) payouts.Job {
	return payouts.Job{DB: d.DB, Payer: payer{d.Payments()}}
}

// payer pays through the harness's payment fake, which keeps Stripe's
// idempotency keys for 24h on the harness clock and records each payment
// as an effect.
type payer struct{ fake *effects.Payments }

func (p payer) Pay(ctx context.Context, t payouts.Transfer) (string, error) {
	pay, err := p.fake.Pay(ctx, effects.PaymentRequest{
		IdempotencyKey: t.IdempotencyKey,
		Destination:    t.Destination,
		Amount:         t.Amount,
		Currency:       t.Currency,
	})
	return pay.ID, err
}

// The key from the job survives every fault but one: a redrive after the
// provider forgot the key pays twice.
func TestWithJobKey(t *testing.T) {
	cfg := config
	cfg.ExpectFinding = "a redrive after the 24h key window pays twice"
	cfg.ExpectPattern = result.KeyWindowPassed
	res := harness.Check(t, withJobKey, cfg)
	if res.Shard != nil {
		return // one shard of several (-twice.shard): the scenarios below may be in another
	}
	for _, s := range res.Scenarios {
		if s.Fault == faults.NameRedrive {
			continue
		}
		if s.Verdict != result.Idempotent {
			t.Errorf("scenario %s (%s) = %s, want only redrives to fail", s.Fault, s.Schedule, s.Verdict)
		}
	}
	if !redriveCrashBeforeRecordFails(res) {
		t.Errorf("no redrive after a crash between the payment and its record was found")
	}
}

// redriveCrashBeforeRecordFails reports whether the redrive whose first
// delivery died after paying and before recording the payout found a
// second payment.
func redriveCrashBeforeRecordFails(res *harness.Result) bool {
	for _, s := range res.Failed() {
		if s.Fault == faults.NameRedrive && s.EffectDiff != nil && s.EffectDiff.Extra == 1 {
			return true
		}
	}
	return false
}

// A provider that remembers keys longer than the redrive's 72h answers
// the redrive from the key too: the job key then survives every fault.
// Set the window of the provider the job really calls.
func TestWithJobKeyAtAProviderWithAWeeksWindow(t *testing.T) {
	cfg := config
	cfg.Providers = effects.Providers{Payments: effects.PaymentProvider{KeyWindow: 7 * 24 * time.Hour}}
	harness.Check(t, withJobKey, cfg)
}

func TestWithRandomKey(t *testing.T) {
	cfg := config
	cfg.ExpectFinding = "a new key on every attempt pays again after any crash"
	cfg.ExpectPattern = result.KeyPerAttempt
	res := harness.Check(t, withRandomKey, cfg)
	if res.Shard != nil {
		return // one shard of several (-twice.shard): the scenarios below may be in another
	}
	found := map[faults.Name]bool{}
	for _, s := range res.Failed() {
		found[s.Fault] = true
	}
	for _, f := range []faults.Name{faults.NameCrashMidJob, faults.NameConcurrentDelivery, faults.NameRedrive} {
		if !found[f] {
			t.Errorf("fault %s found nothing; want a double payment", f)
		}
	}
}
