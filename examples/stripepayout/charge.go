package stripepayout

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v82"
)

// OrderSchema is one order waiting for its charge.
const OrderSchema = `
CREATE TABLE orders (
  id          bigint PRIMARY KEY,
  customer    text   NOT NULL,
  total_paise bigint NOT NULL,
  status      text   NOT NULL DEFAULT 'pending', -- pending, paid
  charge_id   text
);
INSERT INTO orders (id, customer, total_paise) VALUES (9812, 'cus_77', 84000);
`

// Checkout charges an order's customer through Stripe and marks the
// order paid.
type Checkout struct {
	DB     *pgxpool.Pool
	Stripe *stripe.Client
}

// ChargeOrder charges a pending order, then marks it paid: one HTTP call
// between a read and a write. Reading that the order is pending guards
// nothing against a second delivery that reads it before the first has
// marked it (a visibility timeout), and stripe-go draws a new key for
// every call, so both deliveries charge.
func (c Checkout) ChargeOrder(ctx context.Context, orderID int64) error {
	var customer, status string
	var paise int64
	err := c.DB.QueryRow(ctx, `SELECT customer, total_paise, status FROM orders WHERE id = $1`, orderID).Scan(&customer, &paise, &status)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("order %d not found", orderID)
	}
	if err != nil || status != "pending" {
		return err
	}
	ch, err := c.Stripe.V1Charges.Create(ctx, &stripe.ChargeCreateParams{
		Amount:   stripe.Int64(paise),
		Currency: stripe.String("inr"),
		Customer: stripe.String(customer),
	})
	if err != nil {
		return fmt.Errorf("charging order %d: %w", orderID, err)
	}
	_, err = c.DB.Exec(ctx, `UPDATE orders SET status = 'paid', charge_id = $2 WHERE id = $1`, orderID, ch.ID)
	return err
}
