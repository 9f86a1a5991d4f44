package wireproxy

import (
	"net"
	"time"
)

// AskServerOnly makes p decide whether a step outside a transaction block
// is a commit point from the server's answer alone, never from its text;
// call it before the first connection.
func AskServerOnly(p *Proxy) { p.serverOnly.Store(true) }

// TextCommitPoint and TextAsks say what the proxy makes of sql run outside
// a transaction block by its text: a commit point, or a question for the
// server.
func TextCommitPoint(sql string) bool { return commitPoint(splitSQL(sql), 'I') }
func TextAsks(sql string) bool        { return needsProbe(splitSQL(sql), 'I') }

// NewPipe is the in-memory pipe Dial serves.
func NewPipe() (net.Conn, net.Conn) { return newPipe() }

// Buffered is how many bytes wait to be read at c, an end of a pipe
// Dial returned.
func Buffered(c net.Conn) int { return c.(*pipeEnd).buffered() }

// SlowRelay makes every relay of proxies started from now on take d
// before it loops back to read its client's next message, until undone.
func SlowRelay(d time.Duration) (undo func()) {
	testHookLoop = func() { time.Sleep(d) }
	return func() { testHookLoop = nil }
}

// SlowRead makes every relay of proxies started from now on take d after
// it has read a client message of type typ, before it acts on it, until
// undone.
func SlowRead(typ byte, d time.Duration) (undo func()) {
	testHookRead = func(got byte) {
		if got == typ {
			time.Sleep(d)
		}
	}
	return func() { testHookRead = nil }
}

// AllParked reports whether every connection of p waits for its client's
// next message with nothing half read: between round trips.
func AllParked(p *Proxy) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if !c.parked.Load() {
			return false
		}
	}
	return true
}

// Conns is how many client connections of p have not ended.
func Conns(p *Proxy) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}
