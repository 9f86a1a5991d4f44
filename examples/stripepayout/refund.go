package stripepayout

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v82"
)

// RefundSchema is the subscriptions a cancellation refunds, and the
// invoices a billing run sends.
const RefundSchema = `
CREATE TABLE subscriptions (
  id                  text        PRIMARY KEY,
  charge_id           text        NOT NULL,
  period_start        timestamptz NOT NULL,
  period_end          timestamptz NOT NULL,
  cancel_requested_at timestamptz,
  status              text        NOT NULL DEFAULT 'active',
  refund_id           text
);
CREATE TABLE invoices_sent (
  invoice_id text PRIMARY KEY
);
`

// Billing refunds cancelled subscriptions and sends invoices through
// Stripe.
type Billing struct {
	DB     *pgxpool.Pool
	Stripe *stripe.Client
	Now    func() time.Time
}

// RefundUnused cancels the subscription and refunds the unused part of
// its period's charge, prorated to the second at the time it runs, under
// a key made from the subscription: a retry that runs later asks for
// another amount under the same key, which Stripe refuses.
func (b Billing) RefundUnused(ctx context.Context, sub string) error {
	return b.refund(ctx, sub, false)
}

// RefundUnusedAtRequest is RefundUnused prorated to the moment the
// customer asked to cancel, recorded with the request: every retry asks
// for the same amount.
func (b Billing) RefundUnusedAtRequest(ctx context.Context, sub string) error {
	return b.refund(ctx, sub, true)
}

func (b Billing) refund(ctx context.Context, sub string, atRequest bool) error {
	var charge, status string
	var start, end time.Time
	var requested *time.Time
	if err := b.DB.QueryRow(ctx, `SELECT charge_id, period_start, period_end, cancel_requested_at, status FROM subscriptions WHERE id = $1`, sub).
		Scan(&charge, &start, &end, &requested, &status); err != nil {
		return fmt.Errorf("reading subscription %s: %w", sub, err)
	}
	if status == "canceled" {
		return nil
	}
	ch, err := b.Stripe.V1Charges.Retrieve(ctx, charge, nil)
	if err != nil {
		return fmt.Errorf("reading charge %s: %w", charge, err)
	}
	at := b.Now()
	if atRequest && requested != nil {
		at = *requested
	}
	unused := ch.Amount * int64(end.Sub(at)/time.Second) / int64(end.Sub(start)/time.Second)
	params := &stripe.RefundCreateParams{Charge: stripe.String(charge), Amount: stripe.Int64(unused)}
	params.SetIdempotencyKey("refund-" + sub + "-cancel")
	re, err := b.Stripe.V1Refunds.Create(ctx, params)
	if err != nil {
		return fmt.Errorf("refunding %d of charge %s: %w", unused, charge, err)
	}
	_, err = b.DB.Exec(ctx, `UPDATE subscriptions SET status = 'canceled', refund_id = $2 WHERE id = $1`, sub, re.ID)
	return err
}

// SendInvoice sends the invoice through Stripe, which emails it to the
// customer, unless it is recorded as sent, and records it: at least once,
// since a delivery that dies between the two sends it again.
func (b Billing) SendInvoice(ctx context.Context, invoice string) error {
	var sent bool
	if err := b.DB.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM invoices_sent WHERE invoice_id = $1)`, invoice).Scan(&sent); err != nil || sent {
		return err
	}
	if _, err := b.Stripe.V1Invoices.SendInvoice(ctx, invoice, nil); err != nil {
		return fmt.Errorf("sending invoice %s: %w", invoice, err)
	}
	_, err := b.DB.Exec(ctx, `INSERT INTO invoices_sent (invoice_id) VALUES ($1) ON CONFLICT DO NOTHING`, invoice)
	return err
}
