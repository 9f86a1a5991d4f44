package execute

import (
	"time"

	"github.com/runtwice/twice/harness/result"
)

// ownConnsGrace is how long a delivery that returned waits for the
// connections its handler opened on the DSN to end: a client that closed
// one just before returning (a pool's Reset closes in the background) may
// not have been read by the proxy yet. Only a connection still open costs
// the wait.
const ownConnsGrace = 200 * time.Millisecond

// noteOwnConns counts, when d's handler has returned and before its
// proxy is released, the connections the handler opened on the DSN itself
// and did not close: the delivery's own pools (d.DB, d.SQL()) carry the
// proxy's mark (wireproxy.MarkPool) and are not counted. Release then
// closes them, as it closes the pools'; a worker in production would keep
// each open until it exits, one more for every job.
func (e *execution) noteOwnConns(d *deliveryRun) {
	if d.proxy == nil || d.life == dead {
		return
	}
	if n := d.proxy.OpenUnmarked(ownConnsGrace); n > 0 {
		e.r.leftConns.add(result.ConnectionLeftOpen, d.spec, e.sched, n)
	}
}
