// Package stripepayout is the seed's "pay this restaurant ₹84,000" as
// production writes it: a job that moves the money with stripe-go's
// Transfers API and records it. Its code never imports twice: the test
// builds the *stripe.Client on the delivery's HTTP client, where
// production builds it on the default one.
//
// The job has the shape production code often has: pay, then record the
// payment with INSERT ... ON CONFLICT DO NOTHING. The database side is
// idempotent (a second record is a no-op); whether the payment is depends
// on its key alone, since every redelivery calls Stripe again.
//
// WithJobKey sends an Idempotency-Key made from the job
// ("payout-restaurant-381-2026-W42"), the same on every retry, so Stripe
// answers a retry from the key, for as long as it remembers keys (24h): a
// redrive days later pays twice. WithDefaultKey sends none of its own, so
// stripe-go draws a new random key on every call: it survives its own
// retries inside one call, and nothing else; every redelivery, even after
// the record was written, pays again.
//
// GlobalJob is the same job as code that sets stripe-go up once per
// process writes it: stripe.Key set at start-up and the package-level
// transfer.New, with no client and no context passed in. Its test hands
// it nothing but the database: the process's default HTTP client, which
// stripe-go's global backend uses, reaches the delivery's provider.
package stripepayout

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/transfer"
)

// Schema is the record of payouts made.
const Schema = `
CREATE TABLE payouts (
  restaurant_id bigint NOT NULL,
  week          text   NOT NULL,
  amount_paise  bigint NOT NULL,
  transfer_id   text   NOT NULL,
  PRIMARY KEY (restaurant_id, week)
);
`

// Payout is one restaurant's money for one week.
type Payout struct {
	RestaurantID int64
	Week         string // ISO week: "2026-W42"
	AmountPaise  int64
}

// Job pays restaurants through Stripe and records what it paid.
type Job struct {
	DB     *pgxpool.Pool
	Stripe *stripe.Client
}

// jobKey is the payout's idempotency key, made from what the job is: the
// same on every retry.
func (p Payout) jobKey() string {
	return fmt.Sprintf("payout-restaurant-%d-%s", p.RestaurantID, p.Week)
}

// WithJobKey pays, with an idempotency key made from what the job is,
// then records the payout unless it is recorded already.
func (j Job) WithJobKey(ctx context.Context, p Payout) error {
	return j.pay(ctx, p, p.jobKey())
}

// WithDefaultKey is WithJobKey leaving the key to stripe-go, which draws
// a new one for every call.
func (j Job) WithDefaultKey(ctx context.Context, p Payout) error {
	return j.pay(ctx, p, "")
}

func (j Job) pay(ctx context.Context, p Payout, key string) error {
	params := &stripe.TransferCreateParams{
		Amount:      stripe.Int64(p.AmountPaise),
		Currency:    stripe.String("inr"),
		Destination: stripe.String(fmt.Sprintf("acct_restaurant_%d", p.RestaurantID)),
	}
	if key != "" {
		params.SetIdempotencyKey(key)
	}
	return payThenRecord(ctx, j.DB, p, func() (*stripe.Transfer, error) { return j.Stripe.V1Transfers.Create(ctx, params) })
}

// payThenRecord makes the payout's transfer with create, then records
// the payout unless it is recorded already.
func payThenRecord(ctx context.Context, db *pgxpool.Pool, p Payout, create func() (*stripe.Transfer, error)) error {
	tr, err := create()
	if err != nil {
		return fmt.Errorf("paying restaurant %d for %s: %w", p.RestaurantID, p.Week, err)
	}
	_, err = db.Exec(ctx, `
INSERT INTO payouts (restaurant_id, week, amount_paise, transfer_id) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING`, p.RestaurantID, p.Week, p.AmountPaise, tr.ID)
	return err
}

// GlobalJob is Job on stripe-go's global backend: production sets
// stripe.Key once, at start-up.
type GlobalJob struct {
	DB *pgxpool.Pool
}

// WithJobKey pays with the package-level transfer.New and a key made
// from what the job is, then records the payout unless it is recorded
// already.
func (j GlobalJob) WithJobKey(ctx context.Context, p Payout) error {
	params := &stripe.TransferParams{
		Amount:      stripe.Int64(p.AmountPaise),
		Currency:    stripe.String("inr"),
		Destination: stripe.String(fmt.Sprintf("acct_restaurant_%d", p.RestaurantID)),
	}
	params.SetIdempotencyKey(p.jobKey())
	return payThenRecord(ctx, j.DB, p, func() (*stripe.Transfer, error) { return transfer.New(params) })
}
