// Package chargetimeout holds a checkout job that charges an order's
// customer through a payment provider with Stripe-style idempotency keys.
// A charge call that times out did not necessarily fail: the provider may
// have taken the money and lost only its answer on the way back.
//
// GiveUpOnTimeout treats a timeout as a failed charge: it marks the order
// payment_failed and emails the customer that the payment did not go
// through, though the card may well have been charged. Only a timeout
// shows it; a crash or a clean refusal (a 503) never does. RetryTimeouts
// asks again with the same idempotency key, and the provider answers with
// the charge it made, or makes it now.
//
// The package is production code: it knows nothing of twice. The job
// takes the small Payer and Mailer interfaces it needs and a DB; its tests
// hand it twice's fakes.
package chargetimeout

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Schema is one order waiting for its charge.
const Schema = `
CREATE TABLE orders (
  id          bigint PRIMARY KEY,
  email       text   NOT NULL,
  customer    text   NOT NULL,
  total_cents bigint NOT NULL,
  status      text   NOT NULL DEFAULT 'pending', -- pending, paid, payment_failed
  charge_id   text
);
INSERT INTO orders (id, email, customer, total_cents) VALUES (9812, 'asha@example.com', 'cus_77', 8400);
`

// Payer charges a customer. The provider remembers key: the same key with
// the same parameters is answered with the charge it made for it.
type Payer interface {
	Charge(ctx context.Context, key, customer string, cents int64) (chargeID string, err error)
}

// Mailer sends an email.
type Mailer interface {
	Send(ctx context.Context, to, subject, body string) error
}

// DB is what the job needs of a database handle: a pgx pool, connection
// or transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Checkout charges orders.
type Checkout struct {
	DB     DB
	Payer  Payer
	Mailer Mailer
}

// maxTries bounds the charge calls RetryTimeouts makes in one delivery;
// the queue's own retry comes after.
const maxTries = 3

type order struct {
	email, customer string
	cents           int64
}

// pending returns the order, or nil when it is no longer waiting for its
// charge.
func (c Checkout) pending(ctx context.Context, orderID int64) (*order, error) {
	var o order
	var status string
	err := c.DB.QueryRow(ctx, `SELECT email, customer, total_cents, status FROM orders WHERE id = $1`, orderID).
		Scan(&o.email, &o.customer, &o.cents, &status)
	if err != nil || status != "pending" {
		return nil, err
	}
	return &o, nil
}

// chargeKey is the idempotency key: made from the order, so every attempt
// sends the same one.
func chargeKey(orderID int64) string { return fmt.Sprintf("charge-order-%d", orderID) }

// timedOut reports whether err is a call that ran out of time, as an HTTP
// client reports it: the request may have been carried out.
func timedOut(err error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &t) && t.Timeout())
}

func (c Checkout) markPaid(ctx context.Context, orderID int64, chargeID string) error {
	_, err := c.DB.Exec(ctx, `UPDATE orders SET status = 'paid', charge_id = $2 WHERE id = $1`, orderID, chargeID)
	return err
}

// GiveUpOnTimeout charges a pending order once. A timeout it takes for a
// failed charge: it marks the order and tells the customer. Any other
// error it returns, for the queue to retry.
func (c Checkout) GiveUpOnTimeout(ctx context.Context, orderID int64) error {
	o, err := c.pending(ctx, orderID)
	if err != nil || o == nil {
		return err
	}
	chargeID, err := c.Payer.Charge(ctx, chargeKey(orderID), o.customer, o.cents)
	if timedOut(err) {
		if _, err := c.DB.Exec(ctx, `UPDATE orders SET status = 'payment_failed' WHERE id = $1`, orderID); err != nil {
			return err
		}
		return c.Mailer.Send(ctx, o.email, "Your payment did not go through",
			fmt.Sprintf("Order %d: we could not charge your card. Please try again.", orderID))
	}
	if err != nil {
		return err
	}
	return c.markPaid(ctx, orderID, chargeID)
}

// RetryTimeouts charges a pending order, asking again with the same
// idempotency key when a call times out: the provider answers with the
// charge it made, or makes it now. What still fails it returns, for the
// queue to retry, again with the same key.
func (c Checkout) RetryTimeouts(ctx context.Context, orderID int64) error {
	o, err := c.pending(ctx, orderID)
	if err != nil || o == nil {
		return err
	}
	var chargeID string
	for try := 1; ; try++ {
		chargeID, err = c.Payer.Charge(ctx, chargeKey(orderID), o.customer, o.cents)
		if !timedOut(err) || try == maxTries {
			break
		}
	}
	if err != nil {
		return err
	}
	return c.markPaid(ctx, orderID, chargeID)
}
