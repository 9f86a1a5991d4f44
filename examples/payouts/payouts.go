// Package payouts holds the seed's "pay this restaurant ₹84,000": a job
// whose work is a payment at a provider with Stripe-style idempotency keys.
// WithJobKey builds the key from the job ("payout-restaurant-381-2026-W42"),
// the same on every retry, so the provider deduplicates it, but only for as
// long as the provider remembers keys (24h): a human redriving the job days
// later pays twice. WithRandomKey draws a new key inside the job, which
// protects nothing.
package payouts

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/runtwice/twice/harness"
)

// Schema is the record of payouts made.
const Schema = `
CREATE TABLE payouts (
  restaurant_id bigint NOT NULL,
  week          text   NOT NULL,
  amount_paise  bigint NOT NULL,
  payment_id    text   NOT NULL,
  PRIMARY KEY (restaurant_id, week)
);
`

// Payout is one restaurant's money for one week.
type Payout struct {
	RestaurantID int64
	Week         string // ISO week: "2026-W42"
	AmountPaise  int64
}

// WithJobKey pays unless this week's payout is recorded, with a key made
// from what the job is, then records it.
func WithJobKey(ctx context.Context, d *harness.Delivery, p Payout) error {
	return pay(ctx, d, p, fmt.Sprintf("payout-restaurant-%d-%s", p.RestaurantID, p.Week))
}

// WithRandomKey is WithJobKey with a key drawn inside the job: different
// on every attempt.
func WithRandomKey(ctx context.Context, d *harness.Delivery, p Payout) error {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	return pay(ctx, d, p, hex.EncodeToString(b))
}

func pay(ctx context.Context, d *harness.Delivery, p Payout, key string) error {
	var recorded bool
	err := d.DB.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM payouts WHERE restaurant_id = $1 AND week = $2)`,
		p.RestaurantID, p.Week).Scan(&recorded)
	if err != nil || recorded {
		return err
	}
	payment, err := d.Payments().Pay(ctx, harness.PaymentRequest{
		IdempotencyKey: key,
		Destination:    fmt.Sprintf("acct_restaurant_%d", p.RestaurantID),
		Amount:         p.AmountPaise,
		Currency:       "INR",
	})
	if err != nil {
		return err
	}
	_, err = d.DB.Exec(ctx, `
INSERT INTO payouts (restaurant_id, week, amount_paise, payment_id) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING`, p.RestaurantID, p.Week, p.AmountPaise, payment.ID)
	return err
}
