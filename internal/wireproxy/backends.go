package wireproxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Backends keeps the server connections (backends) that proxies have
// finished with, so that a delivery's connect is a handshake
// with its proxy alone: starting a PostgreSQL backend (fork, startup,
// authentication) costs more than a short handler's statements.
//
// A backend goes back only from a client connection that ended cleanly
// while idle: the client sent Terminate, or the delivery ended with
// [Proxy.Release], with no round trip out and outside a transaction block.
// It is reset with DISCARD ALL (session settings, prepared statements,
// cursors, temporary tables, advisory locks, LISTEN) and kept for the next
// connection that asks for the same upstream with the same startup
// parameters. A backend of a killed delivery goes back too when its
// connection was between round trips (waiting for its client, or for a
// step's grant): ROLLBACK, then DISCARD ALL, leave the server as the
// session's end at a crash would, before [Proxy.TakeCut] returns. A
// backend of a cut connection, of one killed with a round trip out, or of
// a connection released inside a transaction is closed, as a crash
// closes it: the server rolls its transaction back and releases its
// locks. A backend serves one client connection at a time.
//
// The zero value is not usable; call [NewBackends]. Its methods are safe
// for concurrent use.
type Backends struct {
	mu     sync.Mutex
	idle   map[string][]*backend // by poolKey
	closed bool
	stats  BackendStats
	// upstreams are the parsed Config.Upstream strings of the proxies
	// sharing b, read-only: parsing one (environment, pgpass file) for
	// every delivery was a tenth of a check's CPU.
	upstreams map[string]*pgconn.Config
}

// BackendStats counts what a [Backends] did.
type BackendStats struct {
	// Opened counts backends started for client connections.
	Opened int
	// Reused counts client connections served by a kept backend.
	Reused int
	// Kept counts backends given back and reset.
	Kept int
	// Idle is how many are kept now.
	Idle int
}

// NewBackends returns an empty set of kept backends. Close it when the
// proxies that share it are closed.
func NewBackends() *Backends {
	return &Backends{idle: map[string][]*backend{}}
}

// upstreamConfig parses upstream as a proxy's server connections use it,
// once per b; a nil b parses every time.
func (b *Backends) upstreamConfig(upstream string) (*pgconn.Config, error) {
	if b != nil {
		b.mu.Lock()
		defer b.mu.Unlock()
		if up, ok := b.upstreams[upstream]; ok {
			return up, nil
		}
	}
	up, err := pgconn.ParseConfig(upstream)
	if err != nil {
		return nil, err
	}
	// The proxy speaks protocol 3.0 to both sides (4-byte cancel keys).
	up.MinProtocolVersion, up.MaxProtocolVersion = "3.0", "3.0"
	if b != nil {
		if b.upstreams == nil {
			b.upstreams = map[string]*pgconn.Config{}
		}
		b.upstreams[upstream] = up
	}
	return up, nil
}

// Stats reports what b did so far.
func (b *Backends) Stats() BackendStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	for _, l := range b.idle {
		s.Idle += len(l)
	}
	return s
}

// Close ends every kept backend (a Terminate, then the socket closes) and
// makes b close the backends given back later. Closing twice does nothing.
func (b *Backends) Close() error {
	b.mu.Lock()
	b.closed = true
	idle := b.idle
	b.idle = map[string][]*backend{}
	b.mu.Unlock()
	var errs []error
	for _, l := range idle {
		for _, be := range l {
			errs = append(errs, be.terminate())
		}
	}
	return errors.Join(errs...)
}

// IdlePIDs returns the server PIDs of the backends kept now, so that
// whoever resets their database can leave them be.
func (b *Backends) IdlePIDs() []uint32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var pids []uint32
	for _, l := range b.idle {
		for _, be := range l {
			pids = append(pids, be.pid)
		}
	}
	return pids
}

// take hands out a kept backend for key that is still alive, or nil. A
// kept backend can die while it waits: its database was dropped or reset
// by someone who did not spare it, and the server ended the session.
func (b *Backends) take(key string) *backend {
	for {
		b.mu.Lock()
		l := b.idle[key]
		if len(l) == 0 {
			b.mu.Unlock()
			return nil
		}
		be := l[len(l)-1]
		b.idle[key] = l[:len(l)-1]
		b.mu.Unlock()
		if !be.alive() {
			_ = be.conn.Close()
			continue
		}
		b.mu.Lock()
		b.stats.Reused++
		b.mu.Unlock()
		return be
	}
}

func (b *Backends) opened() {
	b.mu.Lock()
	b.stats.Opened++
	b.mu.Unlock()
}

// put resets be and keeps it, or closes it when the reset fails or b is
// closed.
func (b *Backends) put(be *backend) {
	if err := be.reset(); err != nil {
		_ = be.conn.Close()
		return
	}
	b.keep(be)
}

// keep keeps be, reset already, or ends it when b is closed.
func (b *Backends) keep(be *backend) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		_ = be.terminate()
		return
	}
	b.stats.Kept++
	b.idle[be.key] = append(b.idle[be.key], be)
	b.mu.Unlock()
}

// backend is a server connection the proxy took over from pgconn.
type backend struct {
	key      string
	conn     net.Conn
	canceler *pgconn.PgConn // over the same socket, never read or written: sends cancel requests
	pid      uint32
	params   map[string]string // the ParameterStatus values a new client is told
	probes   bool
}

// poolKey says which kept backends a client's startup may take: the same
// upstream and the same startup parameters (user and database are the
// upstream's), so that RESET ALL brings it back to what the client asked.
func poolKey(upstream string, params map[string]string) string {
	var b strings.Builder
	b.WriteString(upstream)
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.WriteByte(0)
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(params[k])
	}
	return b.String()
}

// resetTimeout bounds DISCARD ALL on a backend given back; it takes no
// lock, so only a server in trouble comes near it.
const resetTimeout = 10 * time.Second

// discardAll is the Query message DISCARD ALL.
var discardAll = func() []byte {
	const q = "DISCARD ALL"
	b := []byte{'Q', 0, 0, 0, 0}
	b = append(b, q...)
	b = append(b, 0)
	binary.BigEndian.PutUint32(b[1:], uint32(len(b)-1))
	return b
}()

// reset runs DISCARD ALL and reads its reply up to ReadyForQuery, which
// must say idle. ParameterStatus messages (a RESET ALL reports what it
// restores) update what the next client is told.
func (be *backend) reset() error { return be.run(discardAll, 1) }

// rollback resets the session of a worker that died: ROLLBACK first when
// a transaction block is open (a failed one too), then DISCARD ALL, in
// one round trip. The server is left as a session that ended would have
// left it: the transaction rolled back, its locks and the session's
// advisory locks released, temporary tables, prepared statements,
// cursors, LISTENs and settings gone.
func (be *backend) rollback(inTransaction bool) error {
	if !inTransaction {
		return be.reset()
	}
	return be.run(rollbackThenDiscard, 2)
}

// rollbackThenDiscard is a Query message of ROLLBACK and one of DISCARD
// ALL: two, since DISCARD ALL cannot run in the implicit transaction of
// a multi-statement query string.
var rollbackThenDiscard = append(append([]byte(nil), rollbackMessage...), discardAll...)

// run sends msgs, simple queries that leave no transaction open, and
// reads their replies up to the replies-th ReadyForQuery, each of which
// must say idle.
func (be *backend) run(msgs []byte, replies int) error {
	if err := be.conn.SetDeadline(time.Now().Add(resetTimeout)); err != nil {
		return err
	}
	if _, err := be.conn.Write(msgs); err != nil {
		return err
	}
	var head [5]byte
	var body []byte
	for {
		if _, err := io.ReadFull(be.conn, head[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(head[1:])) - 4
		if n < 0 || n > 1<<20 {
			return fmt.Errorf("invalid message length %d", n)
		}
		body = slices.Grow(body[:0], n)[:n]
		if _, err := io.ReadFull(be.conn, body); err != nil {
			return err
		}
		switch head[0] {
		case 'C', 'N', 'A': // its CommandComplete, notices, notifications that came late
		case 'S':
			name, rest := cString(body)
			value, _ := cString(rest)
			be.params[string(name)] = string(value)
		case 'Z':
			if n != 1 || body[0] != 'I' {
				return fmt.Errorf("DISCARD ALL left transaction status %q", body)
			}
			if replies--; replies > 0 {
				continue
			}
			return be.conn.SetDeadline(time.Time{})
		case 'E':
			return errors.New("DISCARD ALL failed")
		default:
			return fmt.Errorf("unexpected message %q in reply to DISCARD ALL", head[0])
		}
	}
}

// alive reports whether an idle backend's session still stands. An idle
// backend sends nothing until asked (DISCARD ALL ended its LISTENs); one
// the server ended has sent its FATAL error and closed the socket, so
// anything to read, or the end of the stream, means it is gone. The check
// reads without waiting.
func (be *backend) alive() bool {
	if err := be.conn.SetReadDeadline(time.Now()); err != nil {
		return false
	}
	var b [1]byte
	_, err := be.conn.Read(b[:])
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return false // data, EOF or a broken socket
	}
	return be.conn.SetReadDeadline(time.Time{}) == nil
}

// terminate ends the backend's session cleanly and closes the socket.
func (be *backend) terminate() error {
	_ = be.conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = be.conn.Write([]byte{'X', 0, 0, 0, 4})
	return be.conn.Close()
}
