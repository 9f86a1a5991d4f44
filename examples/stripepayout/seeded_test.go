package stripepayout_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/runtwice/twice/harness/effects"
)

// seeded is what the Stripe provider holds before a job runs: a customer,
// the charge of her subscription, its invoice and the subscription.
var seeded = map[string]map[string]any{
	"cus_ana":         {"email": "ana@example.com"},
	"ch_sub_ana_w42":  {"amount": 3000, "currency": "eur", "customer": "cus_ana", "status": "succeeded", "paid": true, "captured": true},
	"in_ana_w42":      {"customer": "cus_ana", "status": "draft", "amount_due": 3000, "amount_paid": 0, "currency": "eur"},
	"sub_ana_monthly": {"customer": "cus_ana", "status": "active"},
	// The business plan's charge for the period 5 December - 4 January.
	"ch_sub_ana_dec": {"amount": 120000, "currency": "eur", "customer": "cus_ana", "status": "succeeded", "paid": true, "captured": true},
}

func seededProviders() effects.Providers {
	return effects.Providers{HTTP: effects.HTTPProviders{Hosts: map[string]effects.HTTPHost{
		effects.StripeHost: {Stripe: true, StripeObjects: seeded},
	}}}
}

// stripe-go decodes the seeded objects and what the provider does with
// them: a partial refund of the seeded charge, then one larger than the
// rest (amount_too_large); a PaymentIntent's client_secret, manual
// capture and cancel; an invoice finalized, sent and paid; the
// subscription read.
func TestSeededObjects(t *testing.T) {
	sc := stripeClient(newLogWith(t, seededProviders()).Clients("j1a1w1", "1", 1, &replies{}).HTTPClient())
	ctx := context.Background()
	var se *stripe.Error

	ch, err := sc.V1Charges.Retrieve(ctx, "ch_sub_ana_w42", nil)
	if err != nil || ch.Amount != 3000 || ch.Customer == nil || ch.Customer.ID != "cus_ana" {
		t.Fatalf("seeded charge = %+v, %v", ch, err)
	}
	re, err := sc.V1Refunds.Create(ctx, &stripe.RefundCreateParams{Charge: stripe.String(ch.ID), Amount: stripe.Int64(1200)})
	if err != nil || re.Amount != 1200 || re.Currency != "eur" || re.Charge == nil || re.Charge.ID != ch.ID {
		t.Fatalf("partial refund = %+v, %v", re, err)
	}
	_, err = sc.V1Refunds.Create(ctx, &stripe.RefundCreateParams{Charge: stripe.String(ch.ID), Amount: stripe.Int64(1801)})
	if !errors.As(err, &se) || se.HTTPStatusCode != 400 || se.Code != stripe.ErrorCodeAmountTooLarge {
		t.Errorf("refund past the charge = %v, want 400 amount_too_large", err)
	}
	if ch, err = sc.V1Charges.Retrieve(ctx, ch.ID, nil); err != nil || ch.AmountRefunded != 1200 || ch.Refunded {
		t.Errorf("charge after a partial refund = %+v, %v; want 1200 refunded of 3000", ch, err)
	}

	pi, err := sc.V1PaymentIntents.Create(ctx, &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(500), Currency: stripe.String("eur"),
		PaymentMethod: stripe.String("pm_card_visa"), CaptureMethod: stripe.String("manual")})
	if err != nil || pi.ClientSecret == "" {
		t.Fatalf("payment intent = %+v, %v; want a client_secret", pi, err)
	}
	if pi, err = sc.V1PaymentIntents.Cancel(ctx, pi.ID, nil); err != nil || pi.Status != stripe.PaymentIntentStatusCanceled {
		t.Errorf("cancel = %+v, %v", pi, err)
	}
	if _, err = sc.V1PaymentIntents.Capture(ctx, pi.ID, nil); !errors.As(err, &se) || se.Code != stripe.ErrorCodePaymentIntentUnexpectedState {
		t.Errorf("capture of a canceled intent = %v, want payment_intent_unexpected_state", err)
	}

	inv, err := sc.V1Invoices.FinalizeInvoice(ctx, "in_ana_w42", nil)
	if err != nil || inv.Status != stripe.InvoiceStatusOpen {
		t.Fatalf("finalize = %+v, %v", inv, err)
	}
	if inv, err = sc.V1Invoices.SendInvoice(ctx, inv.ID, nil); err != nil || inv.Status != stripe.InvoiceStatusOpen {
		t.Errorf("send = %+v, %v", inv, err)
	}
	if inv, err = sc.V1Invoices.Pay(ctx, inv.ID, nil); err != nil || inv.Status != stripe.InvoiceStatusPaid || inv.AmountPaid != 3000 {
		t.Errorf("pay = %+v, %v", inv, err)
	}
	if _, err = sc.V1Invoices.Pay(ctx, inv.ID, nil); !errors.As(err, &se) || se.HTTPStatusCode != 400 {
		t.Errorf("paying a paid invoice = %v, want a 400", err)
	}
	sub, err := sc.V1Subscriptions.Retrieve(ctx, "sub_ana_monthly", nil)
	if err != nil || sub.Status != stripe.SubscriptionStatusActive || sub.Customer == nil || sub.Customer.ID != "cus_ana" {
		t.Errorf("subscription = %+v, %v", sub, err)
	}
}

// A seed whose ID names no object, or on a host that is not Stripe's,
// is refused before any scenario runs.
func TestSeededObjectsChecked(t *testing.T) {
	for _, p := range []effects.Providers{
		{HTTP: effects.HTTPProviders{Hosts: map[string]effects.HTTPHost{effects.StripeHost: {Stripe: true, StripeObjects: map[string]map[string]any{"charge-1": {}}}}}},
		{HTTP: effects.HTTPProviders{Hosts: map[string]effects.HTTPHost{"hooks.example.com": {StripeObjects: map[string]map[string]any{"ch_1": {}}}}}},
	} {
		_, err := effects.NewLog(time.Now, p)
		if err == nil || !strings.Contains(err.Error(), "StripeObjects") {
			t.Errorf("NewLog(%v) = %v, want StripeObjects refused", p, err)
		}
	}
}
