// Package receipts holds the seed's receipt email, a job whose work leaves
// the database: the email provider does not deduplicate, so the job must
// pick which way it would rather be wrong. SendThenMark checks
// receipt_sent_at, sends, then sets it: a crash between the two sends a
// rare duplicate, never loses a receipt (at-least-once, what receipts
// want). MarkThenSend sets it first: a crash between loses the receipt.
package receipts

import (
	"context"
	"fmt"

	"github.com/runtwice/twice/harness"
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

func receipt(email string, orderID, total int64) harness.Email {
	return harness.Email{
		To:      email,
		Subject: fmt.Sprintf("Your receipt for order %d", orderID),
		Body:    fmt.Sprintf("Total: ₹%d.%02d", total/100, total%100),
	}
}

// SendThenMark skips an order whose receipt went out, otherwise sends it
// and then records that it did.
func SendThenMark(ctx context.Context, d *harness.Delivery, orderID int64) error {
	var email string
	var total int64
	var sent bool
	err := d.DB.QueryRow(ctx, `SELECT email, total_paise, receipt_sent_at IS NOT NULL FROM orders WHERE id = $1`, orderID).
		Scan(&email, &total, &sent)
	if err != nil || sent {
		return err
	}
	if err := d.Mail().Send(ctx, receipt(email, orderID, total)); err != nil {
		return err
	}
	_, err = d.DB.Exec(ctx, `UPDATE orders SET receipt_sent_at = $2 WHERE id = $1`, orderID, d.Now())
	return err
}

// MarkThenSend claims the receipt by setting receipt_sent_at, and sends it
// only if the claim was new.
func MarkThenSend(ctx context.Context, d *harness.Delivery, orderID int64) error {
	var email string
	var total int64
	err := d.DB.QueryRow(ctx, `
UPDATE orders SET receipt_sent_at = $2
WHERE id = $1 AND receipt_sent_at IS NULL
RETURNING email, total_paise`, orderID, d.Now()).Scan(&email, &total)
	if err != nil {
		if err.Error() == "no rows in result set" {
			return nil // sent before
		}
		return err
	}
	return d.Mail().Send(ctx, receipt(email, orderID, total))
}
