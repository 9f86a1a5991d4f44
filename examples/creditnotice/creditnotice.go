// Package creditnotice holds a job with a well-meant error path: when its
// COMMIT returns an error it emails the customer that their points could
// not be credited. A crash never shows the problem (a dead worker sends
// nothing), but an ambiguous commit does: the COMMIT applied, its reply was
// lost, the customer got the points and an email saying they did not.
package creditnotice

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema is the seed's ledger, with one customer.
const Schema = `
CREATE TABLE customers (id bigint PRIMARY KEY, email text NOT NULL, points int NOT NULL);
CREATE TABLE points_ledger (
  order_id bigint NOT NULL,
  reason   text   NOT NULL,
  points   int    NOT NULL,
  UNIQUE (order_id, reason)
);
INSERT INTO customers VALUES (77, 'asha@example.com', 120);
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

// Rewarder credits loyalty points for orders.
type Rewarder struct {
	DB   *pgxpool.Pool
	Mail Mailer
}

// Reward credits 50 points for the order once, and tells the customer when
// it believes it failed.
func (r Rewarder) Reward(ctx context.Context, customerID, orderID int64) error {
	err := pgx.BeginFunc(ctx, r.DB, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO points_ledger VALUES ($1, 'order_reward', 50) ON CONFLICT DO NOTHING`, orderID)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE customers SET points = points + 50 WHERE id = $1`, customerID)
		return err
	})
	if err != nil {
		_ = r.Mail.Send(ctx, Email{
			To:      "asha@example.com",
			Subject: "We could not credit your points",
			Body:    fmt.Sprintf("Order %d: we will try again.", orderID),
		})
	}
	return err
}
