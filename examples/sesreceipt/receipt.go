// Package sesreceipt mails an order's receipt with Amazon SES (the AWS SDK
// for Go v2's sesv2 client) and records it, as production writes it. Its
// code never imports twice: the test builds the *sesv2.Client on the
// delivery's HTTP client, where production loads its AWS config once and
// builds it on the SDK's default one.
//
// SES takes no idempotency key, so a receipt is at least once: Send looks
// for the record first and writes it after SES accepted the message; a
// delivery that dies between the two sends the receipt again, which the
// receipt's policy allows. SendBeforeCheck is the bug that policy does
// not allow: it mails before it looks, so every redelivery mails again.
package sesreceipt

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sesv2"
	"github.com/aws/aws-sdk-go-v2/service/sesv2/types"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema is the record of receipts sent.
const Schema = `
CREATE TABLE orders (
  id    bigint PRIMARY KEY,
  email text   NOT NULL,
  total text   NOT NULL
);
CREATE TABLE receipts_sent (
  order_id   bigint PRIMARY KEY REFERENCES orders,
  message_id text   NOT NULL
);
`

// From is the address receipts are sent from.
const From = "receipts@shop.example"

// Job mails receipts.
type Job struct {
	DB  *pgxpool.Pool
	SES *sesv2.Client
}

// Send mails order's receipt unless it is recorded as sent, and records
// it once SES accepted it.
func (j Job) Send(ctx context.Context, order int64) error {
	var sent bool
	if err := j.DB.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM receipts_sent WHERE order_id = $1)`, order).Scan(&sent); err != nil || sent {
		return err
	}
	return j.mail(ctx, order)
}

// SendBeforeCheck mails first and records after, with no look at the
// record: every redelivery mails again.
func (j Job) SendBeforeCheck(ctx context.Context, order int64) error {
	return j.mail(ctx, order)
}

func (j Job) mail(ctx context.Context, order int64) error {
	var to, total string
	if err := j.DB.QueryRow(ctx, `SELECT email, total FROM orders WHERE id = $1`, order).Scan(&to, &total); err != nil {
		return fmt.Errorf("reading order %d: %w", order, err)
	}
	out, err := j.SES.SendEmail(ctx, &sesv2.SendEmailInput{
		FromEmailAddress: aws.String(From),
		Destination:      &types.Destination{ToAddresses: []string{to}},
		Content: &types.EmailContent{Simple: &types.Message{
			Subject: &types.Content{Data: aws.String(fmt.Sprintf("Your receipt for order %d", order))},
			Body:    &types.Body{Text: &types.Content{Data: aws.String("Total: " + total)}},
		}},
	})
	if err != nil {
		return fmt.Errorf("mailing the receipt of order %d: %w", order, err)
	}
	_, err = j.DB.Exec(ctx, `INSERT INTO receipts_sent (order_id, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, order, aws.ToString(out.MessageId))
	return err
}
