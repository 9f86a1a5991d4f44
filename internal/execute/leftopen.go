package execute

import (
	"sync"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/result"
)

// leftOpen counts deliveries whose handler returned without an error
// while one of its connections was still in a transaction (a Begin
// without Commit or Rollback on some path), or that closed one inside a
// transaction (wireproxy.Proxy.HandlerReturned). The harness
// cuts such a connection and ends its backend (dead.go), so its work rolls
// back, as a worker's pool would on its next use only by luck; the check
// warns about it, as it is work the handler believes it did.
type leftOpen struct {
	mu sync.Mutex
	w  result.Warning // First is the first such delivery
}

func (l *leftOpen) add(kind result.WarningKind, d faults.Scheduled, sched faults.Schedule, conns int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w.Deliveries == 0 {
		l.w = result.Warning{Kind: kind, First: d, Schedule: sched, Connections: conns}
	}
	l.w.Deliveries++
}

func (l *leftOpen) warning() *result.Warning {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w.Deliveries == 0 {
		return nil
	}
	w := l.w
	return &w
}

// LeftOpen is the warning about deliveries of the check that returned
// with a connection still in a transaction or busy, or nil.
func (r *Executor) LeftOpen() *result.Warning { return r.leftOpen.warning() }

// ConnectionsLeftOpen is the warning about deliveries of the check whose
// handler returned with a connection it opened on the DSN still open
// (ownconns.go), or nil.
func (r *Executor) ConnectionsLeftOpen() *result.Warning { return r.leftConns.warning() }

// GoroutinesOutlived is the warning about deliveries whose handler left
// goroutines running that were still running lateWait after it returned
// (late.go), or nil: what they did later was not checked.
func (r *Executor) GoroutinesOutlived() *result.Warning { return r.outlived.warning() }
