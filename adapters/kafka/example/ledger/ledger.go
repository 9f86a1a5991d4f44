// Package ledger is the database side of the Kafka examples' payment
// consumers, the same ledger read through three clients: payments
// (franz-go), readerledger (kafka-go) and saramaledger (sarama). Each
// reads its records its own client's way, and credits through here. It
// never imports twice.
package ledger

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Schema is the tables a consumer credits: account 7, its ledger lines,
// and the inbox of the payment IDs credited.
const Schema = `
CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL);
CREATE TABLE ledger (id bigserial PRIMARY KEY, payment_id text NOT NULL, account_id bigint NOT NULL, amount bigint NOT NULL);
CREATE TABLE inbox_payments (payment_id text PRIMARY KEY);
INSERT INTO accounts VALUES (7, 0);
`

// Credit writes the payment's ledger line and adds its amount to the
// account's balance, in tx.
func Credit(ctx context.Context, tx pgx.Tx, paymentID string, account, amount int64) error {
	if _, err := tx.Exec(ctx, `INSERT INTO ledger (payment_id, account_id, amount) VALUES ($1, $2, $3)`, paymentID, account, amount); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + $1 WHERE id = $2`, amount, account)
	return err
}

// CreditOnce records the payment's ID in the inbox and credits it, in tx,
// unless the inbox holds the ID already: then it credits nothing, and
// credited is false. A redelivery and a producer's resend carry the same
// ID; a concurrent copy waits on the first one's inbox row.
func CreditOnce(ctx context.Context, tx pgx.Tx, paymentID string, account, amount int64) (credited bool, err error) {
	tag, err := tx.Exec(ctx, `INSERT INTO inbox_payments VALUES ($1) ON CONFLICT DO NOTHING`, paymentID)
	if err != nil || tag.RowsAffected() == 0 {
		return false, err
	}
	return true, Credit(ctx, tx, paymentID, account, amount)
}
