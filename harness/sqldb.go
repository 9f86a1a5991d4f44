package harness

import (
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// SQL is a *sql.DB on the delivery's own connections, through pgx's
// database/sql driver: the same one on every call of the delivery,
// opened on the first and closed by the harness when the delivery ends.
// Hand it to code written for database/sql (sqlc's generated New, GORM's
// postgres.New(postgres.Config{Conn: db}), bun.NewDB with pgdialect,
// ent's entsql.OpenDB, sqlx.NewDb) instead of opening and closing one
// on Delivery.DSN yourself. Its statements are steps like those on
// Delivery.DB. Do not close it and do not keep it past the handler's
// return.
//
// It fails only on a Delivery the harness did not make, or after the
// delivery ended (a handler goroutine that outlived its delivery).
func (d *Delivery) SQL() (*sql.DB, error) {
	if d == nil || d.sqlDB == nil {
		return nil, errors.New("[twice] Delivery.SQL: this Delivery was not made by the harness, so it has no connections; use the *Delivery the harness passes to the handler")
	}
	return d.sqlDB.open()
}

// deliverySQL is a delivery's *sql.DB, opened on first use and closed when
// the delivery ends.
type deliverySQL struct {
	label string          // the delivery, for messages
	cfg   *pgx.ConnConfig // connects to the delivery's proxy

	mu     sync.Mutex
	db     *sql.DB
	closed bool
}

func newDeliverySQL(label string, cfg *pgx.ConnConfig) *deliverySQL {
	return &deliverySQL{label: label, cfg: cfg}
}

func (s *deliverySQL) open() (*sql.DB, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, fmt.Errorf("[twice] Delivery.SQL called after delivery %s ended: the harness closed its connections; a handler must not use its Delivery after it returns or dies", s.label)
	case s.db == nil:
		s.db = stdlib.OpenDB(*s.cfg)
	}
	return s.db, nil
}

// close closes the *sql.DB if it was opened. It does not wait:
// sql.DB.Close waits for queries in flight, and a handler that outlived
// its delivery may hold one.
func (s *deliverySQL) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	db := s.db
	s.mu.Unlock()
	if db != nil {
		go func() { _ = db.Close() }()
	}
}
