-- The seed's loyalty schema: customers with a points balance, and a ledger
-- of every reward that lets the database refuse a duplicate.
CREATE TABLE customers (
  id     bigserial PRIMARY KEY,
  name   text NOT NULL,
  points int  NOT NULL DEFAULT 0
);

CREATE TABLE points_ledger (
  id          bigserial PRIMARY KEY,
  customer_id bigint NOT NULL REFERENCES customers (id),
  order_id    bigint NOT NULL,
  reason      text   NOT NULL,
  points      int    NOT NULL,
  UNIQUE (order_id, reason)
);

-- Customer 77 has earned 120 points so far; the balance matches the ledger.
INSERT INTO customers (id, name, points) VALUES (77, 'Asha', 120), (78, 'Ravi', 0);
SELECT setval('customers_id_seq', 100);
INSERT INTO points_ledger (customer_id, order_id, reason, points)
VALUES (77, 9001, 'order_reward', 70), (77, 9001, 'signup_bonus', 50);
