// Package intents is production River job code in the shape of a worker
// that creates a payment's Stripe PaymentIntent: read the payment, mark
// it as being paid, create the intent with stripe-go's package-level
// paymentintent.New on the global backend (stripe.Key set at start-up),
// record the intent. The intent carries no idempotency key, so stripe-go
// draws a new one per call. It never imports twice; its test checks it
// with twice's River adapter.
//
// River cancels an attempt's context at its timeout and rescues the job
// an hour later; the cancelled attempt's process lives on. Without the
// context (CreateIntentWorker), the cancelled attempt goes on to create
// a second intent beside the rescued attempt's. With it
// (CreateIntentWorker.PassContext), its call fails with the context's
// error once River cancelled it.
package intents

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/paymentintent"
)

// Schema is the payments the worker pays.
const Schema = `
CREATE TABLE payments (
	id        bigint PRIMARY KEY,
	amount    bigint NOT NULL,
	status    text   NOT NULL DEFAULT 'new',
	intent_id text
);
INSERT INTO payments (id, amount) VALUES (7, 2500);
`

// CreateIntentArgs asks for a payment's PaymentIntent.
type CreateIntentArgs struct {
	PaymentID int64 `json:"payment_id"`
}

// Kind is River's name for the job.
func (CreateIntentArgs) Kind() string { return "create_intent" }

// CreateIntentWorker creates a payment's PaymentIntent once the payment
// has none.
type CreateIntentWorker struct {
	river.WorkerDefaults[CreateIntentArgs]
	Pool *pgxpool.Pool
	// PassContext hands the job's context to stripe-go.
	PassContext bool
}

// Work reads the payment, marks it, creates the intent and records it.
func (w *CreateIntentWorker) Work(ctx context.Context, job *river.Job[CreateIntentArgs]) error {
	var amount int64
	var intent *string
	if err := w.Pool.QueryRow(ctx, `SELECT amount, intent_id FROM payments WHERE id = $1`, job.Args.PaymentID).Scan(&amount, &intent); err != nil {
		return fmt.Errorf("reading payment %d: %w", job.Args.PaymentID, err)
	}
	if intent != nil {
		return nil
	}
	if _, err := w.Pool.Exec(ctx, `UPDATE payments SET status = 'paying' WHERE id = $1`, job.Args.PaymentID); err != nil {
		return err
	}
	params := &stripe.PaymentIntentParams{Amount: stripe.Int64(amount), Currency: stripe.String("eur")}
	if w.PassContext {
		params.Context = ctx
	}
	pi, err := paymentintent.New(params)
	if err != nil {
		return fmt.Errorf("creating the intent of payment %d: %w", job.Args.PaymentID, err)
	}
	_, err = w.Pool.Exec(ctx, `UPDATE payments SET status = 'pending', intent_id = $2 WHERE id = $1`, job.Args.PaymentID, pi.ID)
	return err
}
