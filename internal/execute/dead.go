package execute

import (
	"context"
	"fmt"
	"time"

	"github.com/runtwice/twice/harness/result"
)

// buryTimeout bounds how long the server may take to end a dead
// delivery's backends once told to; one still listed then is twice's (or
// the server's) breakage, not the job's.
const buryTimeout = 10 * time.Second

// bury ends on the server what d's cut connections left there, before any
// other delivery of the scenario starts: a dead worker's backends are
// terminated, and the harness waits until the server no longer lists
// them, so their open transactions are rolled back and their locks
// released. (A backend that was between round trips when the worker
// died is not cut: its proxy rolls it back, resets it and keeps it, and
// TakeCut returns once it has, which spares the terminate, the wait and
// a new backend for the next delivery.) Cutting the sockets alone leaves a backend in the middle of a
// statement running it to its end (holding its row locks), and one
// waiting for its client ends only once it is next scheduled: a
// redelivery that claims rows with FOR UPDATE SKIP LOCKED then skipped the
// row the dead delivery had locked, a false alarm on a correct job, where
// a real crash hours before would long have been rolled back. A delivery
// that returned has nothing to bury unless it left a connection busy (a
// transaction open), which Release cuts.
//
// It reports whether d's connections are over on the server: false when
// it never had any, or when the server could not end them (e.failure
// says why).
func (e *execution) bury(d *deliveryRun) bool {
	if d.proxy == nil {
		return false
	}
	if n := d.proxy.LeftOpen(); n > 0 && d.life != dead {
		e.r.leftOpen.add(result.TransactionLeftOpen, d.spec, e.sched, n)
	}
	if pids := d.proxy.TakeCut(); len(pids) > 0 {
		if err := e.r.terminate(e.ctx, e.db.Name, pids); err != nil {
			if e.failure == nil {
				e.failure = fmt.Errorf("%w (ending the backends of %s, which died)", err, d.spec.Label())
			}
			return false
		}
	}
	return true
}

// terminate ends backends pids on database db and returns once
// pg_stat_activity no longer lists any of them. Only backends of db are
// touched: a PID the operating system gave to another process since is
// not the delivery's.
func (r *Executor) terminate(ctx context.Context, db string, pids []uint32) error {
	ids := make([]int32, len(pids))
	for i, p := range pids {
		ids[i] = int32(p)
	}
	ctx, cancel := context.WithTimeout(ctx, buryTimeout)
	defer cancel()
	r.adminMu.Lock()
	defer r.adminMu.Unlock()
	if err := r.connectAdmin(ctx, "to end a dead delivery's backends"); err != nil {
		return err
	}
	const listed = `FROM pg_stat_activity WHERE pid = ANY($1) AND datname = $2`
	if _, err := r.admin.Exec(ctx, `SELECT pg_terminate_backend(pid) `+listed, ids, db); err != nil {
		return r.terminateError(pids, err)
	}
	// The server's own view, asked again until it agrees: each question
	// is a round trip, and a terminated backend is gone within a few.
	for {
		var left int
		if err := r.admin.QueryRow(ctx, `SELECT count(*) `+listed, ids, db).Scan(&left); err != nil {
			return r.terminateError(pids, err)
		}
		if left == 0 {
			return nil
		}
	}
}

func (r *Executor) terminateError(pids []uint32, err error) error {
	if serverWentAway(err) {
		return fmt.Errorf("%w: ending backends %v: %w", ErrServerWentAway, pids, err)
	}
	return fmt.Errorf("ending backends %v and waiting until the server no longer lists them: %w", pids, err)
}
