package execute

import (
	"context"
	"sync"

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
type backendPools struct {
	mu   sync.Mutex
	byDB map[string]*wireproxy.Backends
}

// of returns the kept backends of database db.
func (p *backendPools) of(db string) *wireproxy.Backends {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byDB == nil {
		p.byDB = map[string]*wireproxy.Backends{}
	}
	b := p.byDB[db]
	if b == nil {
		b = wireproxy.NewBackends()
		p.byDB[db] = b
	}
	return b
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

// close ends every kept backend and counts, for BenchmarkLedger, the
// backends the deliveries started and the connections they made.
func (p *backendPools) close() {
	p.mu.Lock()
	pools := p.byDB
	p.byDB = nil
	p.mu.Unlock()
	for _, b := range pools {
		_ = b.Close() // sockets closed; the server ends their sessions on its own
		s := b.Stats()
		backendsStarted.Add(int64(s.Opened))
		deliveryConnects.Add(int64(s.Opened + s.Reused))
	}
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
	return db.DropSparing(ctx, spare)
}
