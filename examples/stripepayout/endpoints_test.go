package stripepayout_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stripe/stripe-go/v82"
)

// stripe-go decodes every endpoint the provider answers, and a decline is
// Stripe's card_error, saved under its key and replayed.
func TestStripeEndpointsDecode(t *testing.T) {
	log := newLog(t)
	sc := stripeClient(log.Clients("j1a1w1", "1", 1, &replies{}).HTTPClient())
	ctx := context.Background()

	cus, err := sc.V1Customers.Create(ctx, &stripe.CustomerCreateParams{Email: stripe.String("asha@example.com")})
	if err != nil || cus.ID != "cus_1" || cus.Email != "asha@example.com" {
		t.Fatalf("customer = %+v, %v", cus, err)
	}
	pi, err := sc.V1PaymentIntents.Create(ctx, &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(5000), Currency: stripe.String("eur"), Customer: stripe.String(cus.ID)})
	if err != nil || pi.ID != "pi_1" || pi.Status != stripe.PaymentIntentStatusRequiresPaymentMethod {
		t.Fatalf("payment intent = %+v, %v", pi, err)
	}
	pi, err = sc.V1PaymentIntents.Confirm(ctx, pi.ID, &stripe.PaymentIntentConfirmParams{PaymentMethod: stripe.String("pm_card_visa")})
	if err != nil || pi.Status != stripe.PaymentIntentStatusSucceeded || pi.LatestCharge == nil || pi.LatestCharge.ID != "ch_1" {
		t.Fatalf("confirmed = %+v, %v", pi, err)
	}
	ch, err := sc.V1Charges.Create(ctx, &stripe.ChargeCreateParams{Amount: stripe.Int64(700), Currency: stripe.String("eur"), Source: &stripe.PaymentSourceSourceParams{Token: stripe.String("tok_visa")}})
	if err != nil || ch.ID != "ch_2" || !ch.Paid || ch.Amount != 700 {
		t.Fatalf("charge = %+v, %v", ch, err)
	}
	re, err := sc.V1Refunds.Create(ctx, &stripe.RefundCreateParams{Charge: stripe.String(ch.ID)})
	if err != nil || re.ID != "re_1" || re.Amount != 700 || re.Status != stripe.RefundStatusSucceeded {
		t.Fatalf("refund = %+v, %v", re, err)
	}
	po, err := sc.V1Payouts.Create(ctx, &stripe.PayoutCreateParams{Amount: stripe.Int64(900), Currency: stripe.String("eur")})
	if err != nil || po.ID != "po_1" || po.Status != stripe.PayoutStatusPending {
		t.Fatalf("payout = %+v, %v", po, err)
	}
	got, err := sc.V1Transfers.Retrieve(ctx, "tr_9", nil)
	var se *stripe.Error
	if !errors.As(err, &se) || se.HTTPStatusCode != 404 || se.Code != stripe.ErrorCodeResourceMissing {
		t.Errorf("retrieving a missing transfer = %+v, %v; want 404 resource_missing", got, err)
	}

	declined := func() error {
		p := &stripe.ChargeCreateParams{Amount: stripe.Int64(700), Currency: stripe.String("eur"), Source: &stripe.PaymentSourceSourceParams{Token: stripe.String("tok_chargeDeclined")}}
		p.SetIdempotencyKey("charge-declined")
		_, err := sc.V1Charges.Create(ctx, p)
		return err
	}
	for i := range 2 {
		err := declined()
		if !errors.As(err, &se) || se.Type != stripe.ErrorTypeCard || se.Code != stripe.ErrorCodeCardDeclined || se.HTTPStatusCode != 402 {
			t.Fatalf("declined charge %d = %v, want 402 card_declined", i+1, err)
		}
		if replayed := se.LastResponse.Header.Get("Idempotent-Replayed") == "true"; replayed != (i == 1) {
			t.Errorf("declined charge %d replayed = %v, want %v", i+1, replayed, i == 1)
		}
	}

	_, err = sc.V1Transfers.Create(ctx, &stripe.TransferCreateParams{Currency: stripe.String("eur"), Destination: stripe.String("acct_1")})
	if !errors.As(err, &se) || se.Code != stripe.ErrorCodeParameterMissing || se.Param != "amount" {
		t.Errorf("transfer without amount = %v, want parameter_missing amount", err)
	}
}

// A call on an object that is not there, or whose ID is another
// resource's, is Stripe's 404 resource_missing, naming the parameter and
// the ID, on every endpoint that takes one.
func TestStripeMissingObjects(t *testing.T) {
	log := newLog(t)
	sc := stripeClient(log.Clients("j1a1w1", "1", 1, &replies{}).HTTPClient())
	ctx := context.Background()
	ch, err := sc.V1Charges.Create(ctx, &stripe.ChargeCreateParams{Amount: stripe.Int64(700), Currency: stripe.String("eur"), Source: &stripe.PaymentSourceSourceParams{Token: stripe.String("tok_visa")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, param, msg string
		call             func() error
	}{
		{"confirm", "intent", "No such payment_intent: 'pi_9'", func() error {
			_, err := sc.V1PaymentIntents.Confirm(ctx, "pi_9", nil)
			return err
		}},
		{"capture a charge's ID", "intent", "No such payment_intent: '" + ch.ID + "'", func() error {
			_, err := sc.V1PaymentIntents.Capture(ctx, ch.ID, nil)
			return err
		}},
		{"cancel", "intent", "No such payment_intent: 'pi_9'", func() error {
			_, err := sc.V1PaymentIntents.Cancel(ctx, "pi_9", nil)
			return err
		}},
		{"finalize", "invoice", "No such invoice: 'in_9'", func() error {
			_, err := sc.V1Invoices.FinalizeInvoice(ctx, "in_9", nil)
			return err
		}},
		{"retrieve", "id", "No such charge: 'ch_9'", func() error {
			_, err := sc.V1Charges.Retrieve(ctx, "ch_9", nil)
			return err
		}},
	} {
		var se *stripe.Error
		if err := tc.call(); !errors.As(err, &se) || se.HTTPStatusCode != 404 || se.Code != stripe.ErrorCodeResourceMissing || se.Param != tc.param || se.Msg != tc.msg {
			t.Errorf("%s: %v; want 404 resource_missing, param %q, %q", tc.name, err, tc.param, tc.msg)
		}
	}
}
