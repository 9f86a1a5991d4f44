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

	"github.com/jackc/pgx/v5/pgxpool"
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

// Transfer is a request to the payment provider.
type Transfer struct {
	// IdempotencyKey deduplicates the request at the provider, for as long
	// as the provider remembers it (Stripe: 24 hours).
	IdempotencyKey string
	Destination    string // the restaurant's account: "acct_restaurant_381"
	Amount         int64  // in paise
	Currency       string
}

// Payer moves money: in production the payment provider's client.
type Payer interface {
	// Pay makes the transfer, or returns the stored answer for a key it
	// has seen, and returns the provider's payment ID.
	Pay(ctx context.Context, t Transfer) (paymentID string, err error)
}

// Job pays restaurants and records what it paid.
type Job struct {
	DB    *pgxpool.Pool
	Payer Payer
}

// WithJobKey pays unless this week's payout is recorded, with a key made
// from what the job is, then records it.
func (j Job) WithJobKey(ctx context.Context, p Payout) error {
	return j.pay(ctx, p, fmt.Sprintf("payout-restaurant-%d-%s", p.RestaurantID, p.Week))
}

// WithRandomKey is WithJobKey with a key drawn inside the job: different
// on every attempt.
func (j Job) WithRandomKey(ctx context.Context, p Payout) error {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	return j.pay(ctx, p, hex.EncodeToString(b))
}

func (j Job) pay(ctx context.Context, p Payout, key string) error {
	var recorded bool
	err := j.DB.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM payouts WHERE restaurant_id = $1 AND week = $2)`,
		p.RestaurantID, p.Week).Scan(&recorded)
	if err != nil || recorded {
		return err
	}
	paymentID, err := j.Payer.Pay(ctx, Transfer{
		IdempotencyKey: key,
		Destination:    fmt.Sprintf("acct_restaurant_%d", p.RestaurantID),
		Amount:         p.AmountPaise,
		Currency:       "INR",
	})
	if err != nil {
		return err
	}
	_, err = j.DB.Exec(ctx, `
INSERT INTO payouts (restaurant_id, week, amount_paise, payment_id) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING`, p.RestaurantID, p.Week, p.AmountPaise, paymentID)
	return err
}
