package chargetimeout_test

import (
	"context"
	"testing"

	"github.com/runtwice/twice/examples/chargetimeout"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
)

// payments is the job's Payer on twice's payment fake; the customer
// charged stands in the fake's Destination.
type payments struct{ d *harness.Delivery }

func (p payments) Charge(ctx context.Context, key, customer string, cents int64) (string, error) {
	pay, err := p.d.Payments().Pay(ctx, effects.PaymentRequest{IdempotencyKey: key, Destination: customer, Amount: cents, Currency: "eur"})
	return pay.ID, err
}

// mail is the job's Mailer on twice's mail fake.
type mail struct{ d *harness.Delivery }

func (m mail) Send(ctx context.Context, to, subject, body string) error {
	return m.d.Mail().Send(ctx, effects.Email{To: to, Subject: subject, Body: body})
}

func checkout(d *harness.Delivery) chargetimeout.Checkout {
	return chargetimeout.Checkout{DB: d.DB, Payer: payments{d}, Mailer: mail{d}}
}

// Both versions share the payouts example's limit: a redrive days after a
// crash between the charge and its record finds the provider has forgotten
// the key and charges again (examples/payouts shows it). Left out here, so
// that the only difference between the two is the timeout.
var config = harness.Config{
	Setup:  []harness.Setup{harness.SQL(chargetimeout.Schema)},
	Faults: faults.DefaultWithout(faults.NameRedrive),
}

var (
	giveUp = harness.Job{Name: "charge-give-up-on-timeout", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return checkout(d).GiveUpOnTimeout(ctx, 9812)
	}}
	retry = harness.Job{Name: "charge-retry-timeouts", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return checkout(d).RetryTimeouts(ctx, 9812)
	}}
)

// Only a lost answer shows it: the customer was charged, the order says
// payment_failed, and an email tells them the payment did not go through.
// A crash, a 503 before the charge, concurrent deliveries: all fine.
func TestGiveUpOnTimeout(t *testing.T) {
	cfg := config
	cfg.ExpectFinding = "a charge whose answer was lost is taken for a failure: charged, marked failed, and told so"
	cfg.ExpectPattern = result.EffectWithoutRecord
	res := harness.Check(t, giveUp, cfg)
	if res.Shard != nil {
		return // one shard of several (-twice.shard): the scenarios below may be in another
	}
	lostReplies := 0
	for _, s := range res.Scenarios {
		want := result.Idempotent
		if s.Fault == faults.NameEffectLostReply {
			want = result.NotIdempotent
			lostReplies++
		}
		if s.Verdict != want {
			t.Errorf("scenario %s (%s) = %s, want %s", s.Fault, s.Schedule, s.Verdict, want)
		}
		if s.Fault != faults.NameEffectLostReply {
			continue
		}
		charged := 0
		for _, e := range s.Effects {
			if e.Kind == "payment" && e.Happened() {
				charged++
			}
		}
		if charged != 1 || s.EffectDiff == nil || s.EffectDiff.Extra != 1 || len(s.StateDiff) != 1 || s.StateDiff[0].Table != "orders" {
			t.Errorf("%s: want one charge, one extra email and the order differing; got %d charges, effects %v, state %v", s.Schedule, charged, s.EffectDiff, s.StateDiff)
		}
	}
	if lostReplies == 0 {
		t.Error("no effect-lost-reply scenario ran: the charge is no effect step of the clean run")
	}
}

// Asking again with the same key gets the charge the provider made: the
// lost answer costs one more call and nothing else.
func TestRetryTimeouts(t *testing.T) {
	res := harness.Check(t, retry, config)
	if res.Shard != nil {
		return // one shard of several (-twice.shard): the scenarios below may be in another
	}
	for _, s := range res.Scenarios {
		if s.Fault != faults.NameEffectLostReply {
			continue
		}
		replayed := false
		for _, e := range s.Effects {
			replayed = replayed || e.Replayed
		}
		if !replayed {
			t.Errorf("%s: the retry was not answered from the idempotency key: %v", s.Schedule, s.Effects)
		}
	}
}
