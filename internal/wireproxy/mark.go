package wireproxy

import (
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// poolParam is the startup parameter that marks a connection of the
// delivery's own pools (the harness's d.DB and d.SQL()). The proxy takes
// it out of the startup message, so the server never sees it and kept
// backends are shared as before; what it tells apart is a connection the
// handler opened itself on the DSN, which [Proxy.OpenUnmarked] counts
// when the delivery returns.
const poolParam = "twice_delivery_pool"

// MarkPool marks every connection made with cfg as one of the delivery's
// own pools.
func MarkPool(cfg *pgconn.Config) {
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams[poolParam] = "on"
}

// marked takes the mark out of a client's startup parameters and says
// whether it was there.
func marked(params map[string]string) bool {
	_, ok := params[poolParam]
	delete(params, poolParam)
	return ok
}

// OpenUnmarked is how many sessions the client opened without the pool
// mark ([MarkPool]) and has not closed: connections the handler made on
// the DSN itself. A client that closed one just before asking may not
// have been read yet, so each is given until grace has passed to end;
// the wait ends as soon as every one has, and costs nothing when none is
// open. Connections a fault cut are not counted.
func (p *Proxy) OpenUnmarked(grace time.Duration) int {
	p.mu.Lock()
	var conns []*conn
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	expired := false
	n := 0
	for _, c := range conns {
		c.mu.Lock()
		session, pool := c.be != nil, c.pool
		c.mu.Unlock()
		if !session || pool || c.isCut.Load() {
			continue
		}
		if !expired {
			select {
			case <-c.ended:
				continue
			case <-deadline.C:
				expired = true
			}
		}
		select {
		case <-c.ended:
		default:
			n++
		}
	}
	return n
}
