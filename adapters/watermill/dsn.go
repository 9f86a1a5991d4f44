package twicewatermill

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"

	"github.com/runtwice/twice/harness"
)

// forwarder is the process's DSN (Worker.DSN): a local listener whose
// connections reach the delivery the process runs at the time each one
// connects, through that delivery's proxy, so a repository that opens
// its own database/sql pool from a DSN (sqlx with lib/pq, pgx's stdlib)
// at startup makes that delivery's steps as Worker.DB does. It forwards
// bytes and reads none of them: the user and database are the scenario's,
// written into the DSN it hands out. When a delivery ends its
// connections are closed, as the delivery's own are, so the pool
// reconnects for the next one.
type forwarder struct {
	ln  net.Listener
	dsn string // the DSN the process hands out

	mu     sync.Mutex
	target string // the current delivery's proxy, host:port; "" between deliveries
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

// newForwarder listens on a free local port and writes d's DSN with that
// address: the scenario's user and database, reached through whichever
// delivery is current.
func newForwarder(d *harness.Delivery) (*forwarder, error) {
	u, err := url.Parse(d.DSN)
	if err != nil {
		return nil, fmt.Errorf("the delivery's DSN: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("a local listener for Worker.DSN: %w", err)
	}
	out := *u
	out.Host = ln.Addr().String()
	f := &forwarder{ln: ln, dsn: out.String(), conns: map[net.Conn]bool{}}
	f.wg.Go(f.accept)
	return f, nil
}

func (f *forwarder) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return // closed
		}
		f.mu.Lock()
		target := f.target
		f.mu.Unlock()
		if target == "" {
			// No delivery runs: the connection is refused as the pool's
			// would be (Worker.DB's BeforeConnect); the client sees it
			// closed.
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			continue
		}
		f.mu.Lock()
		if f.target != target {
			// The delivery ended while this one dialled.
			f.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			continue
		}
		f.conns[c], f.conns[up] = true, true
		f.mu.Unlock()
		f.wg.Go(func() { f.pipe(c, up) })
		f.wg.Go(func() { f.pipe(up, c) })
	}
}

// pipe copies from src to dst until either ends, then closes both.
func (f *forwarder) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	f.mu.Lock()
	delete(f.conns, dst)
	delete(f.conns, src)
	f.mu.Unlock()
	_ = dst.Close()
	_ = src.Close()
}

// setTarget points new connections at the delivery's proxy at host, or
// refuses them when host is "" (between deliveries); the connections of
// the delivery that ended are closed.
func (f *forwarder) setTarget(host string) {
	f.mu.Lock()
	f.target = host
	var open []net.Conn
	if host == "" {
		for c := range f.conns {
			open = append(open, c)
		}
	}
	f.mu.Unlock()
	for _, c := range open {
		_ = c.Close()
	}
}

// close stops listening, closes every connection and waits for the
// pipes.
func (f *forwarder) close() error {
	err := f.ln.Close()
	f.setTarget("")
	f.wg.Wait()
	return err
}
