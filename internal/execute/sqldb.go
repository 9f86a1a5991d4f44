package execute

import (
	"database/sql"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/runtwice/twice/internal/blame"
)

// DeliverySQL is a delivery's *sql.DB (harness's Delivery.SQL), opened on
// first use and closed when the delivery ends.
type DeliverySQL struct {
	label string          // the delivery, for messages
	cfg   *pgx.ConnConfig // connects to the delivery's proxy

	mu     sync.Mutex
	db     *sql.DB
	closed bool
}

func newDeliverySQL(label string, cfg *pgx.ConnConfig) *DeliverySQL {
	return &DeliverySQL{label: label, cfg: cfg}
}

// Open returns the delivery's *sql.DB, opening it on the first call; it
// fails once the delivery has ended.
func (s *DeliverySQL) Open() (*sql.DB, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, blame.Userf("Delivery.SQL called after delivery %s ended: the harness closed its connections; a handler must not use its Delivery after it returns or dies", s.label)
	case s.db == nil:
		s.db = stdlib.OpenDB(*s.cfg)
	}
	return s.db, nil
}

// close closes the *sql.DB if it was opened. It does not wait:
// sql.DB.Close waits for queries in flight, and a handler that outlived
// its delivery may hold one.
func (s *DeliverySQL) close() {
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
