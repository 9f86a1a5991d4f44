// Package receipts holds the seed's receipt email, a job whose work leaves
// the database: the email provider does not deduplicate, so the job must
// pick which way it would rather be wrong. SendThenMark checks
// receipt_sent_at, sends, then sets it: a crash between the two sends a
// rare duplicate, never loses a receipt (at-least-once, what receipts
// want). MarkThenSend sets it first: a crash between loses the receipt.
package receipts

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema is one order waiting for its receipt.
const Schema = `
CREATE TABLE orders (
  id              bigint PRIMARY KEY,
  email           text   NOT NULL,
  total_paise     bigint NOT NULL,
  receipt_sent_at timestamptz
);
INSERT INTO orders (id, email, total_paise) VALUES (9812, 'asha@example.com', 84000);
`

// Email is a message to a customer.
type Email struct {
	To      string
	Subject string
	Body    string
}

// Mailer sends email: in production the email provider's client, which
// does not deduplicate, so every call is one more email.
type Mailer interface {
	Send(ctx context.Context, e Email) error
}

// Sender sends order receipts.
type Sender struct {
	DB   *pgxpool.Pool
	Mail Mailer
	// Now is the time recorded as receipt_sent_at; nil means time.Now.
	Now func() time.Time
}

func (s Sender) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

func receipt(email string, orderID, total int64) Email {
	return Email{
		To:      email,
		Subject: fmt.Sprintf("Your receipt for order %d", orderID),
		Body:    fmt.Sprintf("Total: ₹%d.%02d", total/100, total%100),
	}
}

// SendThenMark skips an order whose receipt went out, otherwise sends it
// and then records that it did.
func (s Sender) SendThenMark(ctx context.Context, orderID int64) error {
	var email string
	var total int64
	var sent bool
	err := s.DB.QueryRow(ctx, `SELECT email, total_paise, receipt_sent_at IS NOT NULL FROM orders WHERE id = $1`, orderID).
		Scan(&email, &total, &sent)
	if err != nil || sent {
		return err
	}
	if err := s.Mail.Send(ctx, receipt(email, orderID, total)); err != nil {
		return err
	}
	_, err = s.DB.Exec(ctx, `UPDATE orders SET receipt_sent_at = $2 WHERE id = $1`, orderID, s.now())
	return err
}

// MarkThenSend claims the receipt by setting receipt_sent_at, and sends it
// only if the claim was new.
func (s Sender) MarkThenSend(ctx context.Context, orderID int64) error {
	var email string
	var total int64
	err := s.DB.QueryRow(ctx, `
UPDATE orders SET receipt_sent_at = $2
WHERE id = $1 AND receipt_sent_at IS NULL
RETURNING email, total_paise`, orderID, s.now()).Scan(&email, &total)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // sent before
	}
	if err != nil {
		return err
	}
	return s.Mail.Send(ctx, receipt(email, orderID, total))
}
