package execute

import (
	"fmt"
	"sync"
)

// leftOpen counts deliveries whose handler returned while one of its
// connections was still busy: a transaction left open (a Begin without
// Commit or Rollback on some path), or a statement still out. The harness
// cuts such a connection and ends its backend (dead.go), so its work rolls
// back, as a worker's pool would on its next use only by luck; the check
// warns about it, as it is work the handler believes it did.
type leftOpen struct {
	mu    sync.Mutex
	n     int
	first string // the first such delivery, named
}

func (l *leftOpen) add(what string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == 0 {
		l.first = what
	}
	l.n++
}

// note is the warning about job, or "" when no delivery left one open.
func (l *leftOpen) note(job string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.n {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf("[twice] warning: job %q: %s; the harness rolled it back. Commit or roll back every transaction before the handler returns (defer tx.Rollback(ctx) after Begin)", job, l.first)
	}
	return fmt.Sprintf("[twice] warning: job %q: %d deliveries returned with a connection still in a transaction or busy, the first %s; the harness rolled them back. Commit or roll back every transaction before the handler returns (defer tx.Rollback(ctx) after Begin)", job, l.n, l.first)
}

// LeftOpen is the warning about job, when a delivery of the check
// returned with a connection still in a transaction or busy, or "".
func (r *Executor) LeftOpen(job string) string { return r.leftOpen.note(job) }
