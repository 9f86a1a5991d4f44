package execute

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
)

// queueConns keeps, per scenario database, the harness's connection for
// the job's queue (openQueue) for the whole check, and after it with the
// database's backends (parking, backends.go): the next scenario on
// that database, after its reset in place, runs the queue's operations on
// a backend whose catalog caches are warm and whose prepared statements
// (pgx's statement cache) are still there, instead of starting a backend
// and preparing the queue's statements again. A database is given back
// with its kept queue connection spared from the reset (giveBack); one
// left in a transaction or broken is closed instead of kept, and one the
// server ended meanwhile (its database dropped or kept as evidence) is
// never taken again, as a database's name is never reused.
type queueConns struct {
	mu   sync.Mutex
	byDB map[string]*pgx.Conn
}

// take returns db's kept queue connection, or nil.
func (p *queueConns) take(db string) *pgx.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	conn := p.byDB[db]
	delete(p.byDB, db)
	if conn != nil && conn.IsClosed() {
		return nil
	}
	return conn
}

// put keeps conn for db's next scenario when it is idle and outside a
// transaction, and closes it otherwise.
func (p *queueConns) put(ctx context.Context, db string, conn *pgx.Conn) {
	if conn.IsClosed() || conn.PgConn().IsBusy() || conn.PgConn().TxStatus() != 'I' {
		_ = conn.Close(ctx)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byDB == nil {
		p.byDB = map[string]*pgx.Conn{}
	}
	if old := p.byDB[db]; old != nil {
		defer func() { _ = old.Close(ctx) }()
	}
	p.byDB[db] = conn
}

// pid is the server backend of db's kept queue connection, or 0.
func (p *queueConns) pid(db string) uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if conn := p.byDB[db]; conn != nil {
		return conn.PgConn().PID()
	}
	return 0
}

// close closes every kept queue connection.
func (p *queueConns) close(ctx context.Context) {
	p.mu.Lock()
	conns := p.byDB
	p.byDB = nil
	p.mu.Unlock()
	for _, conn := range conns {
		_ = conn.Close(ctx)
	}
}
