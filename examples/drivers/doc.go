// Package drivers holds the seed's loyalty job, "reward order 9812 with 50
// points", written once for each common Go PostgreSQL driver: pgx (a
// connection or a pgxpool), database/sql (over pgx's stdlib or lib/pq),
// GORM, bun (over its own pgdriver or pgx's stdlib) and sqlc's generated
// code for pgx and for database/sql. Each is written twice: WithLedger
// records the reward under the order's key and adds the points only when
// the record is new, in one transaction (idempotent); Increment adds the
// points on every delivery (not idempotent).
//
// The code is production code: it takes the handle its driver opens and
// never imports twice. The tests connect every driver on the Delivery's
// DSN (or use Delivery.DB and Delivery.SQL) and check that twice judges
// both jobs right through each one, which proves every driver's
// statements reach the harness as steps.
//
// This is a module of its own, so twice's users do not inherit GORM, bun
// or lib/pq.
package drivers

import _ "embed"

// schema is the tables, as sqlc reads them too.
//
//go:embed schema.sql
var schema string

// Schema creates the tables and customer 77 with 120 points.
var Schema = schema + "INSERT INTO customers (id, points) VALUES (77, 120);\n"

// Points is what one order earns.
const Points = 50
