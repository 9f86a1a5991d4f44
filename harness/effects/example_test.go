package effects_test

import (
	"context"
	"fmt"
	"time"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
)

// A payout keyed by the job, not the attempt: a retry gets the stored
// payment back instead of paying again.
func ExamplePayments_Pay() {
	handler := func(ctx context.Context, d *harness.Delivery) error {
		_, err := d.Payments().Pay(ctx, effects.PaymentRequest{
			IdempotencyKey: "payout-restaurant-381-2026-W42",
			Destination:    "acct_381",
			Amount:         48_250,
			Currency:       "eur",
		})
		return err
	}
	_ = harness.Job{Name: "weekly-payout", Handler: handler}
}

// grantEvery is an executor that lets every call through at once.
type grantEvery struct{}

func (grantEvery) Begin(context.Context, faults.Step) (effects.Reply, error) {
	return effects.Answered, nil
}
func (grantEvery) End(faults.Step) {}

// The executor's side: one log per scenario, clients per delivery. A
// test of a client wrapper can drive the fakes the same way, with no
// database.
func ExampleLog() {
	now := func() time.Time { return time.Date(2026, time.January, 1, 9, 0, 0, 0, time.UTC) }
	log, err := effects.NewLog(now, effects.Providers{})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	payout := effects.PaymentRequest{IdempotencyKey: "payout-381-W42", Destination: "acct_381", Amount: 5000, Currency: "eur"}
	for attempt := 1; attempt <= 2; attempt++ {
		c := log.Clients(fmt.Sprintf("j1a%dw%d", attempt, attempt), "job-1", attempt, grantEvery{})
		if _, err := c.Payments().Pay(ctx, payout); err != nil {
			fmt.Println(err)
		}
		if err := c.Mail().Send(ctx, effects.Email{To: "owner@restaurant-381.example", Subject: "Paid"}); err != nil {
			fmt.Println(err)
		}
	}
	for _, e := range log.Effects() {
		fmt.Printf("%s %s happened=%t\n", e.Delivery, e, e.Happened())
	}
	// Output:
	// j1a1w1 payment key=payout-381-W42 destination=acct_381 amount=5000 currency=eur happened=true
	// j1a1w1 email to=owner@restaurant-381.example subject=Paid body="" happened=true
	// j1a2w2 payment key=payout-381-W42 destination=acct_381 amount=5000 currency=eur happened=false
	// j1a2w2 email to=owner@restaurant-381.example subject=Paid body="" happened=true
}
