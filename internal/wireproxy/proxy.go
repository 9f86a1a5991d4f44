// Package wireproxy is the PostgreSQL wire-protocol proxy that stands
// between a delivery's handler and the real server. It turns every statement
// the handler sends into a [Step] that the harness can let through, hold,
// crash at, or make ambiguous (applied by the server, reply lost).
//
// One [Proxy] serves one delivery: it listens on a loopback port (or a unix
// socket) of its own, and every connection made to it belongs to the
// delivery, as does every one [Proxy.Dial] opens inside the process,
// which skips the kernel's hop to the proxy. The proxies of one scenario
// may share [Backends], which
// keeps the server connections of cleanly closed client connections for
// the next delivery: a connect is then a handshake with the proxy alone. The proxy works at the protocol level, so every Go driver goes
// through it: pgx in each query exec mode and database/sql over pgx's
// stdlib are tested; lib/pq speaks the same protocol (untested here, it is
// no dependency of the module).
//
// # What a step is
//
// A step is one round trip that executes SQL:
//   - a simple-protocol Query message, unless it holds no statement (pool
//     health checks send ";" or "-- ping");
//   - an extended-protocol batch that contains an Execute, up to its Sync
//     (or up to a Flush, for drivers that execute before syncing). A pgx
//     Batch is one step.
//
// A Parse/Describe/Sync round trip that only prepares is not a step, so a
// statement prepared and executed by pgx's statement cache counts once.
// A COPY is one step; its data flows through while the step is open.
// FunctionCall messages are relayed but are no steps (Go drivers do not
// send them).
//
// A step waits until the connection's earlier round trips are answered, so
// it starts from a known transaction status (which labels commit points)
// and a connection has at most one step in flight. Steps of different
// connections are independent: holding one holds no other.
//
// # Commit points
//
// A step is a commit point when it makes something durable: a COMMIT, or
// a statement outside a transaction block that wrote. The SQL text shows
// most of them (COMMIT, INSERT, CALL, DO, DDL, nextval); where it cannot
// (a SELECT, VALUES, WITH, EXPLAIN or COPY TO that may call a function
// that writes), the proxy asks the server, in the statement's own implicit
// transaction, whether it was given a transaction ID, and hides the
// question's reply from the client (commitprobe.go).
//
// # Authentication
//
// The proxy ends the client's startup itself (it asks for no password) and
// binds a kept backend of the same startup parameters ([Backends]) or
// opens the matching server connection with pgconn from [Config.Upstream],
// so any server authentication (SCRAM, TLS, unix sockets) works and the
// handler's DSN carries no secret. The client's runtime parameters
// (application_name, DateStyle, search_path, ...) are passed on; its user
// and database must match the upstream's. SSLRequest and GSSENCRequest are
// answered 'N'. Both sides speak protocol 3.0. A CancelRequest for one of
// the delivery's backends is sent on to the server; the key the client
// holds is the proxy's own, so no other client can cancel the delivery.
//
// # Lifetime
//
// [Proxy.Kill] makes the delivery dead: every client socket is cut, and
// later connections get a FATAL error instead of a server; a backend
// between round trips is rolled back and kept (see [Backends]), any
// other is cut. [Proxy.Release]
// ends a delivery that finished: later connections are refused the same
// way, busy connections are cut, and idle ones give their backends back. The listener stays open
// until [Proxy.Close], so a late connection of a dead delivery can never
// reach a newer delivery that was given the same port. An [Ambiguous] step
// cuts only its own connection: the delivery may connect again.
//
// # Limits
//
// A COPY FROM STDIN sent through the extended protocol (Parse/Bind/Execute,
// which no Go driver does) swallows a Sync, and the connection's next step
// would wait for a reply that never comes, until the delivery is killed.
package wireproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"
)

// Config says which delivery a proxy serves and where its server is.
type Config struct {
	// Label names the delivery in steps and messages, e.g. "d1 attempt 1".
	Label string
	// Upstream is the connection string (URL or key=value, as pgconn parses
	// it) of the delivery's database on the real server. Required.
	Upstream string
	// Hooks steer the steps; zero hooks forward everything.
	Hooks Hooks
	// UnixSocket makes the proxy listen on a unix socket in a directory of
	// its own instead of a loopback TCP port.
	UnixSocket bool
	// Backends, when set, keeps the backends of client connections that end
	// cleanly for the next connection, of this proxy or another that shares
	// it: see [Backends]. Nil opens a backend for every client connection
	// and closes it with the connection.
	Backends *Backends
}

// Proxy is one delivery's proxy. Its methods are safe for concurrent use.
type Proxy struct {
	label          string
	upstream       *pgconn.Config
	upstreamString string // Config.Upstream, which names kept backends
	backends       *Backends
	hooks          Hooks
	ln             net.Listener
	sockDir        string // the unix socket's directory, removed by Close

	ctx    context.Context // cancelled by Kill and Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	dead    error // why the delivery is dead; nil while it lives
	closed  bool
	conns   map[*conn]struct{}
	nextID  int
	steps   int
	pids    []uint32
	secrets map[uint32][4]byte // pid -> the cancel key given to the client
	cutPIDs []uint32           // backends of cut connections, until TakeCut
	crashed []*conn            // connections Kill left to roll back, until TakeCut
	// returned: HandlerReturned was called. leftOpen counts the sessions
	// the client ended in a transaction before it, then also those it
	// found in one.
	returned bool
	leftOpen int

	// serverOnly asks the server about every step outside a transaction
	// block, ignoring the text: the tests compare the two with it.
	serverOnly atomic.Bool
	// releasing is set by Release: a connection waiting for its client gives
	// its backend back instead of closing it.
	releasing atomic.Bool
}

// ErrDead is wrapped by errors reported for a delivery after [Proxy.Kill].
var ErrDead = errors.New("delivery is dead")

// Listen starts a proxy for one delivery on 127.0.0.1 with a port of its own
// (or a unix socket, see Config.UnixSocket). It does not connect to the
// server until a client connects.
func Listen(cfg Config) (*Proxy, error) {
	if cfg.Upstream == "" {
		return nil, fmt.Errorf("wireproxy.Listen for %q: Config.Upstream is empty; pass the connection string of the delivery's database", cfg.Label)
	}
	up, err := cfg.Backends.upstreamConfig(cfg.Upstream)
	if err != nil {
		return nil, fmt.Errorf("wireproxy.Listen for %q: Config.Upstream is not a PostgreSQL connection string: %w", cfg.Label, err)
	}
	var ln net.Listener
	var sockDir string
	if cfg.UnixSocket {
		sweepOnce.Do(func() { sweepSockDirs(os.TempDir()) })
		if sockDir, err = os.MkdirTemp("", sockDirPattern()); err == nil {
			// The name drivers derive from host=<dir> and the default port.
			ln, err = net.Listen("unix", filepath.Join(sockDir, ".s.PGSQL.5432"))
			if err != nil {
				_ = os.RemoveAll(sockDir)
			}
		}
	} else {
		// Plain TCP: Go listens with MPTCP by default where the kernel
		// has it, which costs a listen more and gains nothing on loopback.
		var lc net.ListenConfig
		lc.SetMultipathTCP(false)
		ln, err = lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	}
	if err != nil {
		return nil, fmt.Errorf("wireproxy.Listen for %q: cannot listen: %w", cfg.Label, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		label:          cfg.Label,
		upstream:       up,
		upstreamString: cfg.Upstream,
		backends:       cfg.Backends,
		hooks:          cfg.Hooks,
		ln:             ln,
		sockDir:        sockDir,
		ctx:            ctx,
		cancel:         cancel,
		conns:          map[*conn]struct{}{},
		secrets:        map[uint32][4]byte{},
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address: host:port, or the unix socket's
// path.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// DSN is the connection string a handler uses for this delivery: the
// upstream's user and database at the proxy's address, no password, and
// sslmode=disable (sslmode=prefer works too: the proxy declines TLS), in
// the URL form pgx and database/sql over pgx's stdlib accept.
func (p *Proxy) DSN() string {
	u := url.URL{
		Scheme: "postgres",
		User:   url.User(p.upstream.User),
		Host:   p.Addr(),
		Path:   "/" + p.upstream.Database,
	}
	q := url.Values{"sslmode": {"disable"}}
	if p.sockDir != "" {
		u.Host = ""
		q.Set("host", p.sockDir)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Kill makes the delivery dead now, as if its worker crashed: it cuts every
// client socket of the delivery, cancels blocked [Hooks.Before] calls, and
// refuses every later connection. A server connection between round trips
// has its transaction rolled back and its session reset, and is kept
// (with Config.Backends; [Proxy.TakeCut] waits for it); any other is cut,
// so the server rolls back its open transaction. Killing a dead proxy does
// nothing.
func (p *Proxy) Kill() { p.kill(fmt.Errorf("%w: %s was killed", ErrDead, p.label)) }

func (p *Proxy) kill(why error) {
	for _, c := range p.end(why, false) {
		if c.crash() {
			p.mu.Lock()
			p.crashed = append(p.crashed, c)
			p.mu.Unlock()
			continue
		}
		c.cut()
	}
}

// end makes the delivery dead (why, unless it already was), marks it
// releasing if asked, cancels its blocked hooks and returns its
// connections, for the caller to cut or release.
func (p *Proxy) end(why error, releasing bool) []*conn {
	p.mu.Lock()
	if p.dead == nil {
		p.dead = why
	}
	if releasing {
		p.releasing.Store(true)
	}
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	p.cancel()
	return conns
}

// Release ends the delivery as a worker that finished ends it: like Kill, it
// makes the delivery dead, cancels blocked [Hooks.Before] calls and refuses
// later connections; but a connection whose client is between round trips
// outside a transaction block gives its backend back to Config.Backends
// instead of closing it (see [Backends]), and any other is cut. It
// closes every client's side at once, and each connection decides from
// the protocol's state once its relay stops reading, not from how soon
// it gets there: nothing out, no transaction open by the last
// ReadyForQuery. It returns once every connection has ended, so a
// delivery that starts next finds the backends kept. Without
// Config.Backends it is Kill.
func (p *Proxy) Release() {
	if p.backends == nil {
		p.Kill()
		return
	}
	conns := p.end(fmt.Errorf("%w: %s ended", ErrDead, p.label), true)
	for _, c := range conns {
		_ = c.client.Close() // serve gives the backend back, or cuts it
	}
	for _, c := range conns {
		<-c.ended
	}
}

// Commit ends the delivery's held step ([Hold]) once its statement has
// run ([Hooks.Held]): its transaction commits, then the client gets the
// statement's reply and [Hooks.After] is called. It does not wait for the
// commit, and does nothing when no step waits.
func (p *Proxy) Commit() {
	p.mu.Lock()
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.commitHold()
	}
}

// Dead reports why the delivery is dead, or nil while it lives.
func (p *Proxy) Dead() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dead
}

// Close kills the delivery, stops listening and waits until every goroutine
// of the proxy has ended, including running hooks (Before must return once
// its context is done).
func (p *Proxy) Close() error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.mu.Unlock()
	p.kill(fmt.Errorf("%w: %s was closed", ErrDead, p.label))
	var err error
	if !already {
		err = p.ln.Close()
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
	}
	p.wg.Wait()
	if p.sockDir != "" && !already {
		err = errors.Join(err, os.RemoveAll(p.sockDir))
	}
	return err
}

// PIDs are the backend process IDs of every server connection the delivery
// used, in the order its client connections were bound to them, including
// closed ones (a kept backend used twice appears twice): after a crash the
// harness can wait until they are gone from pg_stat_activity.
func (p *Proxy) PIDs() []uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]uint32(nil), p.pids...)
}

// Serves reports whether backend pid serves one of the delivery's client
// connections now: one given back (Backends) may serve another
// delivery's next.
func (p *Proxy) Serves(pid uint32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if c.pid == pid {
			return true
		}
	}
	return false
}

// TakeCut returns the backend process IDs of the server connections the
// proxy cut (Kill, a busy connection at Release, a lost reply) since the
// last call. Cutting a socket does not end its backend at once: one in
// the middle of a statement runs it to its end, holding its locks and its
// open transaction, and one waiting for its client notices the closed
// socket only when it is next scheduled. The harness terminates these and
// waits until the server no longer lists them before another delivery
// starts (see harness's dead.go), as a real crash would have ended them
// long before.
//
// It first waits for the connections Kill found between round trips,
// whose backends are rolled back and kept rather than cut (a backend
// that cannot be is cut, and listed).
func (p *Proxy) TakeCut() []uint32 {
	p.mu.Lock()
	crashed := p.crashed
	p.crashed = nil
	p.mu.Unlock()
	for _, c := range crashed {
		<-c.ended
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	cut := p.cutPIDs
	p.cutPIDs = nil
	return cut
}

// HandlerReturned records that the delivery's handler returned, and
// LeftOpen then reports how many of its sessions it left in a
// transaction block, by the status of the last ReadyForQuery the server
// sent on each: the status the client itself holds, since the proxy
// records it before it passes the reply on. Whatever such a session did
// rolls back when it ends (Release cuts it). A session the client ended
// inside a transaction before the return counts too (a pool that closes
// a connection given back in one, as pgxpool does, may do it just before
// or just after the return); one a fault ended (Kill, a lost reply)
// never does. So the count depends on what the client was told, never
// on how far the proxy's goroutines have got. Later calls do nothing.
func (p *Proxy) HandlerReturned() {
	p.mu.Lock()
	if p.returned {
		p.mu.Unlock()
		return
	}
	p.returned = true
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	n := 0
	for _, c := range conns { // c.mu is taken without p.mu: see rollBackAndTake
		if !c.lost.Load() && c.inTransaction() {
			n++
		}
	}
	p.mu.Lock()
	p.leftOpen += n
	p.mu.Unlock()
}

// LeftOpen is how many sessions the delivery's handler left in a
// transaction block when it returned (see [Proxy.HandlerReturned]);
// zero until then.
func (p *Proxy) LeftOpen() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.returned {
		return 0
	}
	return p.leftOpen
}

// noteCut records c's backend as cut.
func (p *Proxy) noteCut(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.pid != 0 && !slices.Contains(p.cutPIDs, c.pid) {
		p.cutPIDs = append(p.cutPIDs, c.pid)
	}
}

// InFlight are the steps that were forwarded to the server and whose reply
// has not arrived yet. A step that stays here may be waiting on a lock: ask
// the server pg_blocking_pids(step.PID).
func (p *Proxy) InFlight() []Step {
	p.mu.Lock()
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	var out []Step
	for _, c := range conns {
		out = c.appendInFlight(out)
	}
	return out
}

// Dial connects to the proxy inside the process, with no socket in
// between: the client's end of an in-memory pipe whose other end the
// proxy serves as it serves a connection to [Proxy.Addr]. A client that
// can be given a dial function (pgconn.Config.DialFunc) saves the
// kernel's hop to the proxy on every round trip: the handler's goroutine
// hands its bytes straight to the proxy's. Each direction of the pipe
// buffers what a socket would (256 kB), so a write goes on without
// waiting for the reader until the buffer is full, and a message the
// server sends on its own to an idle connection waits in it for the
// client. The connection has deadlines; reads after the proxy closed its
// end return what it wrote before, then io.EOF. Dial fails only once
// the proxy is closed; a dead delivery's connection is refused at its
// startup, as on the listener.
func (p *Proxy) Dial(ctx context.Context) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	client, server := newPipe()
	if !p.serveConn(server) {
		_ = client.Close()
		return nil, fmt.Errorf("wireproxy: dial %s: the proxy is closed: %w", p.label, net.ErrClosed)
	}
	return client, nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			return // closed by Close
		}
		if !p.serveConn(nc) {
			_ = nc.Close()
		}
	}
}

// serveConn serves a client connection on a goroutine of its own, unless
// the proxy is closed.
func (p *Proxy) serveConn(nc net.Conn) bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	p.nextID++
	_, inProcess := nc.(*pipeEnd)
	c := &conn{p: p, id: p.nextID, client: nc, inProcess: inProcess, ended: make(chan struct{})}
	p.conns[c] = struct{}{}
	p.wg.Add(1) // under mu, so Close, which sets closed under mu, waits for it
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		c.serve()
		p.mu.Lock()
		delete(p.conns, c)
		if c.endedInTx && p.dead == nil && !p.returned {
			p.leftOpen++ // ended by the client in a transaction: see HandlerReturned
		}
		p.mu.Unlock()
		close(c.ended)
	}()
	return true
}

// register records a backend once its connection is up; it fails if the
// delivery died meanwhile.
func (p *Proxy) register(c *conn, pid uint32, secret [4]byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead != nil {
		return p.dead
	}
	c.pid = pid
	p.pids = append(p.pids, pid)
	p.secrets[pid] = secret
	return nil
}

// unregister forgets c's backend for cancel requests once it is given
// back.
func (p *Proxy) unregister(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.secrets, c.pid)
	c.pid = 0
}

// refuseCancels drops the cancel requests for c's backend from now on,
// as unregister does, but leaves its PID for cut to report should the
// backend not be given back after all.
func (p *Proxy) refuseCancels(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.secrets, c.pid)
}

// nextStep numbers a step; indexes count from 1 across the delivery.
func (p *Proxy) nextStep() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead != nil {
		return 0, p.dead
	}
	p.steps++
	return p.steps, nil
}

// cancelTarget finds the connection a CancelRequest names, counting the
// request in its cancels until forwardCancel has sent it.
func (p *Proxy) cancelTarget(pid uint32, secret []byte) *conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	want, ok := p.secrets[pid]
	if p.dead != nil || !ok || string(secret) != string(want[:]) {
		return nil
	}
	for c := range p.conns {
		if c.pid == pid {
			c.cancels.Add(1) // under p.mu: unregister and refuseCancels wait for it
			return c
		}
	}
	return nil
}
