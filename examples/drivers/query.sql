-- name: AddLedgerEntry :execrows
INSERT INTO points_ledger (order_id, customer_id, points)
VALUES ($1, $2, $3)
ON CONFLICT (order_id) DO NOTHING;

-- name: AddPoints :exec
UPDATE customers SET points = points + $2 WHERE id = $1;
