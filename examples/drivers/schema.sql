-- The seed's loyalty points: a customer's balance and a ledger whose key,
-- the order, refuses a second reward. sqlc reads it too (sqlc.yaml).
CREATE TABLE customers (
  id     bigint PRIMARY KEY,
  points int    NOT NULL
);

CREATE TABLE points_ledger (
  order_id    bigint PRIMARY KEY,
  customer_id bigint NOT NULL REFERENCES customers (id),
  points      int    NOT NULL
);
