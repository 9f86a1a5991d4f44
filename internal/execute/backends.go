package execute

import (
	"context"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/internal/freshdb"
	"github.com/runtwice/twice/internal/wireproxy"
)

// backendPools keeps, per scenario database, the server backends that
// deliveries which returned gave back (wireproxy.Backends), for the whole
// check: the next delivery on that database, in this scenario or a later
// one on the same database after its reset in place, connects with a
// handshake with its proxy instead of starting a backend (a fork, and a
// cold catalog cache, the larger part of a short handler's scenario). A
// database is given back with its idle backends spared from the reset
// (giveBack), so they survive it; a dead worker's backends are cut as
// before, and a kept backend the server ended meanwhile (a database
// dropped or kept as evidence) is noticed when taken and replaced.
//
// When the check ends, the backends of each database it gave back are
// parked for the next check that gets the same database (one of its
// template's clones), and the others closed.
type backendPools struct {
	mu   sync.Mutex
	byDB map[string]*wireproxy.Backends
	// base is what a pool taken from the parking had done before this
	// check, so that the counts of BackendCounts are this check's.
	base map[string]wireproxy.BackendStats
	// given says whether the database's last use by this check ended
	// with it given back.
	given map[string]bool
}

// of returns the kept backends of database db, and marks it in use. The
// first time in a check, it takes what an earlier check parked for db:
// its backends, and its queue connection, which it returns.
func (p *backendPools) of(db string) (*wireproxy.Backends, *pgx.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byDB == nil {
		p.byDB = map[string]*wireproxy.Backends{}
		p.base = map[string]wireproxy.BackendStats{}
		p.given = map[string]bool{}
	}
	p.given[db] = false
	if b := p.byDB[db]; b != nil {
		return b, nil
	}
	kept := parking.take(db)
	if kept.backends == nil {
		kept.backends = wireproxy.NewBackends()
	} else {
		p.base[db] = kept.backends.Stats()
	}
	p.byDB[db] = kept.backends
	return kept.backends, kept.queue
}

// gaveBack notes that db was given back, reset in place with its idle
// backends spared.
func (p *backendPools) gaveBack(db string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.byDB[db]; ok {
		p.given[db] = true
	}
}

// idle returns the PIDs of db's kept backends.
func (p *backendPools) idle(db string) []uint32 {
	p.mu.Lock()
	b := p.byDB[db]
	p.mu.Unlock()
	if b == nil {
		return nil
	}
	return b.IdlePIDs()
}

// close parks the kept backends of the databases given back, with their
// kept queue connections (taken from queues), and ends the others, and
// counts, for BenchmarkLedger, the backends the deliveries started and
// the connections they made.
func (p *backendPools) close(ctx context.Context, queues *queueConns) {
	p.mu.Lock()
	pools, base, given := p.byDB, p.base, p.given
	p.byDB, p.base, p.given = nil, nil, nil
	p.mu.Unlock()
	for db, b := range pools {
		s, was := b.Stats(), base[db]
		backendsStarted.Add(int64(s.Opened - was.Opened))
		deliveryConnects.Add(int64(s.Opened + s.Reused - was.Opened - was.Reused))
		if given[db] {
			parking.park(ctx, db, parked{backends: b, queue: queues.take(db)})
		} else {
			_ = b.Close() // sockets closed; the server ends their sessions on its own
		}
	}
	queues.close(ctx)
}

// maxParked bounds the server sessions parked between checks in one
// process: enough for the databases of a few templates' checks. Fewer
// are kept where the server has little room left (Executor.Close).
const maxParked = 32

// parking holds what ended checks kept of each database they gave back
// (its idle backends, its queue connection) until a later check gets the
// same database, one of its template's clones (backendPools.of), the
// oldest closed first once more than maxParked sessions wait. A
// database's name is never reused, so what a dropped database kept is
// never taken, only closed.
var parking parkedSessions

// parked is what a check kept of one database.
type parked struct {
	backends *wireproxy.Backends
	queue    *pgx.Conn // nil without a queue
}

// sessions is how many server sessions p holds.
func (p parked) sessions() int {
	n := p.backends.Stats().Idle
	if p.queue != nil {
		n++
	}
	return n
}

func (p parked) close(ctx context.Context) {
	_ = p.backends.Close()
	if p.queue != nil {
		_ = p.queue.Close(ctx)
	}
}

type parkedSessions struct {
	mu    sync.Mutex
	byDB  map[string]parked
	order []string // the databases, parked first to last
	// admin is an Executor's connection that asks the server about locks
	// and ends dead deliveries' backends, by the server's connection
	// string: one per server.
	admin map[string]*pgx.Conn
}

// AdminParking is a parking of its own for the connections that ask a
// server about locks, which Executor.Close parks and the next check takes:
// for the tests that need a real server, which live outside this package.
type AdminParking struct{ p parkedSessions }

// Park parks conn for connString as Executor.Close does.
func (a *AdminParking) Park(ctx context.Context, connString string, conn *pgx.Conn) {
	a.p.parkAdmin(ctx, connString, conn)
}

// Take takes what is parked for connString as the next check does.
func (a *AdminParking) Take(ctx context.Context, connString string) *pgx.Conn {
	return a.p.takeAdmin(ctx, connString)
}

// takeAdmin returns and unparks the connection parked for the server at
// connString, if it still answers, or nil.
func (p *parkedSessions) takeAdmin(ctx context.Context, connString string) *pgx.Conn {
	p.mu.Lock()
	conn := p.admin[connString]
	delete(p.admin, connString)
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

// parkAdmin keeps conn for the next check on the server at connString,
// or closes it when one is parked already.
func (p *parkedSessions) parkAdmin(ctx context.Context, connString string, conn *pgx.Conn) {
	p.mu.Lock()
	if p.admin == nil {
		p.admin = map[string]*pgx.Conn{}
	}
	if p.admin[connString] != nil || conn.IsClosed() || conn.PgConn().TxStatus() != 'I' {
		p.mu.Unlock()
		_ = conn.Close(ctx)
		return
	}
	p.admin[connString] = conn
	p.mu.Unlock()
}

// take returns and unparks what was parked for db, or nothing.
func (p *parkedSessions) take(db string) parked {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept, ok := p.byDB[db]
	if ok {
		delete(p.byDB, db)
		p.order = slices.DeleteFunc(p.order, func(n string) bool { return n == db })
	}
	return kept
}

// shed closes the oldest parked until n sessions are closed, or none is
// left.
func (p *parkedSessions) shed(ctx context.Context, n int) {
	var closing []parked
	p.mu.Lock()
	for n > 0 && len(p.order) > 0 {
		oldest := p.byDB[p.order[0]]
		n -= oldest.sessions()
		closing = append(closing, oldest)
		delete(p.byDB, p.order[0])
		p.order = p.order[1:]
	}
	p.mu.Unlock()
	for _, k := range closing {
		k.close(ctx)
	}
}

// pids returns the server PIDs of what is parked for db.
func (p *parkedSessions) pids(db string) []uint32 {
	p.mu.Lock()
	kept, ok := p.byDB[db]
	p.mu.Unlock()
	if !ok {
		return nil
	}
	pids := kept.backends.IdlePIDs()
	if kept.queue != nil {
		pids = append(pids, kept.queue.PgConn().PID())
	}
	return pids
}

// park keeps what a check kept of db for its next check, and closes the
// oldest parked while more than maxParked sessions wait.
func (p *parkedSessions) park(ctx context.Context, db string, kept parked) {
	var closing []parked
	p.mu.Lock()
	if p.byDB == nil {
		p.byDB = map[string]parked{}
	}
	if old, ok := p.byDB[db]; ok {
		closing = append(closing, old)
		p.order = slices.DeleteFunc(p.order, func(n string) bool { return n == db })
	}
	p.byDB[db] = kept
	p.order = append(p.order, db)
	waiting := 0
	for _, k := range p.byDB {
		waiting += k.sessions()
	}
	p.mu.Unlock()
	for _, k := range closing {
		k.close(ctx)
	}
	p.shed(ctx, waiting-maxParked)
}

// giveBack gives db back after a scenario or a clean run, sparing from its
// reset the backends its deliveries left idle (reset with DISCARD ALL) and
// the queue's kept connection (queueconns.go). Every execution on db has
// ended by then, so those backends are idle.
func (r *Executor) giveBack(ctx context.Context, db *freshdb.Database) error {
	spare := r.backends.idle(db.Name)
	if pid := r.queueConns.pid(db.Name); pid != 0 {
		spare = append(spare, pid)
	}
	// Parked for db by another check and not taken by this one: a check
	// that gives db back without running on it leaves them be too.
	spare = append(spare, parking.pids(db.Name)...)
	if err := db.DropSparing(ctx, spare); err != nil {
		return err
	}
	r.backends.gaveBack(db.Name)
	return nil
}
