package execute

import "context"

// world is what the event loop asks of what lies outside it: a delivery's
// connections and the server's lock table. A scenario's is liveWorld,
// over the deliveries' wire proxies and the server; the core's tests
// script one (core_test.go), so the grant, hold and fault rules run with
// no server.
type world interface {
	// close ends d's connections as its life says: a dead worker's are cut
	// and their backends ended on the server, a returned one's are given
	// back. It reports false when what a dead worker left on the server
	// could not be ended (execution.failure says why).
	close(d *deliveryRun) bool
	// commit lets d's held commit through (holds.go).
	commit(d *deliveryRun)
	// blockedBy lists the server's backends that backend pid waits for
	// (pg_blocking_pids): none when it waits on no lock.
	blockedBy(ctx context.Context, pid uint32) ([]uint32, error)
	// owns reports whether backend pid serves one of d's connections now.
	owns(d *deliveryRun, pid uint32) bool
}

// liveWorld is a scenario's world: the deliveries' wire proxies and the
// server.
type liveWorld struct{ e *execution }

func (w liveWorld) close(d *deliveryRun) bool {
	if d.life == dead {
		d.proxy.Kill()
	} else {
		w.e.noteOwnConns(d) // ownconns.go
		d.proxy.Release()
	}
	return w.e.bury(d) // dead.go
}

func (w liveWorld) commit(d *deliveryRun) { d.proxy.Commit() }

func (w liveWorld) blockedBy(ctx context.Context, pid uint32) ([]uint32, error) {
	return w.e.r.blockedBy(ctx, pid)
}

func (w liveWorld) owns(d *deliveryRun, pid uint32) bool {
	return d.proxy != nil && d.proxy.Serves(pid)
}

// waitsOnLock reports whether the server's backend pid waits on a lock.
func (e *execution) waitsOnLock(ctx context.Context, pid uint32) (bool, error) {
	by, err := e.world.blockedBy(ctx, pid)
	return len(by) > 0, err
}
