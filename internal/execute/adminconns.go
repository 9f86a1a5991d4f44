package execute

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
)

// parkedAdmins keeps, per server, the connection an ended check's
// Executor asked about locks on (and ended dead deliveries' backends
// with), for the next check on the same server: a check with
// overlapping deliveries connected anew for it.
var parkedAdmins adminConns

// adminConns are parked admin connections by the server's connection
// string, one per server.
type adminConns struct {
	mu     sync.Mutex
	byConn map[string]*pgx.Conn
}

// take returns and unparks the connection parked for the server at
// connString, if it still answers, or nil.
func (p *adminConns) take(ctx context.Context, connString string) *pgx.Conn {
	p.mu.Lock()
	conn := p.byConn[connString]
	delete(p.byConn, connString)
	p.mu.Unlock()
	if conn == nil {
		return nil
	}
	if err := conn.Ping(ctx); err != nil {
		_ = conn.Close(ctx)
		return nil
	}
	return conn
}

// park keeps conn for the next check on the server at connString, or
// closes it when one is parked already or it is not idle.
func (p *adminConns) park(ctx context.Context, connString string, conn *pgx.Conn) {
	p.mu.Lock()
	if p.byConn == nil {
		p.byConn = map[string]*pgx.Conn{}
	}
	if p.byConn[connString] != nil || conn.IsClosed() || conn.PgConn().TxStatus() != 'I' {
		p.mu.Unlock()
		_ = conn.Close(ctx)
		return
	}
	p.byConn[connString] = conn
	p.mu.Unlock()
}
