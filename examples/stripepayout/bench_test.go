package stripepayout_test

import (
	"context"
	"testing"
	"time"

	"github.com/runtwice/twice/examples/payouts"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
)

// viaFake is the same payout through the old payment fake (examples/payouts
// with its shim): the cost the stripe-go check is compared with.
var viaFake = harness.Job{Name: "payout-via-payment-fake", Handler: func(ctx context.Context, d *harness.Delivery) error {
	return payouts.Job{DB: d.DB, Payer: fakePayer{d.Payments()}}.WithJobKey(ctx, payouts.Payout{RestaurantID: 381, Week: "2026-W42", AmountPaise: 84_000_00})
}}

type fakePayer struct{ fake *effects.Payments }

func (p fakePayer) Pay(ctx context.Context, t payouts.Transfer) (string, error) {
	pay, err := p.fake.Pay(ctx, effects.PaymentRequest{IdempotencyKey: t.IdempotencyKey, Destination: t.Destination, Amount: t.Amount, Currency: t.Currency})
	return pay.ID, err
}

// BenchmarkStripeGoVsPaymentFake runs the default matrix on the stripe-go
// payout and on the same payout through the payment fake, alternating in
// one run, and reports each one's time per check and their ratio. The
// machine may be shared: compare the ratio, not the times.
func BenchmarkStripeGoVsPaymentFake(b *testing.B) {
	ctx := context.Background()
	fakeCfg := harness.Config{Setup: []harness.Setup{harness.SQL(payouts.Schema)}}
	var stripeTime, fakeTime time.Duration
	check := func(job harness.Job, cfg harness.Config) time.Duration {
		start := time.Now()
		res, err := harness.Run(ctx, job, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Scenarios) == 0 {
			b.Fatal("no scenarios ran")
		}
		return time.Since(start)
	}
	for b.Loop() {
		stripeTime += check(withJobKey, config)
		fakeTime += check(viaFake, fakeCfg)
	}
	n := float64(b.N)
	b.ReportMetric(float64(stripeTime.Milliseconds())/n, "stripe-go-ms/check")
	b.ReportMetric(float64(fakeTime.Milliseconds())/n, "fake-ms/check")
	b.ReportMetric(float64(stripeTime)/float64(fakeTime), "ratio")
}
