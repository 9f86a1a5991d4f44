package wireproxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// maxMessage is PostgreSQL's own limit on a message from the client.
const maxMessage = 1 << 30

// conn relays one client connection. Its serve goroutine reads the client
// and decides on steps; its reader goroutine relays the server's replies
// and sees each step finish (ReadyForQuery).
type conn struct {
	p      *Proxy
	id     int
	client net.Conn
	isCut  atomic.Bool
	// inProcess: client is a pipe from Dial, whose reader is a goroutine
	// of this process.
	inProcess bool

	ended  chan struct{} // closed when serve has ended and the backend is given back or closed
	parked atomic.Bool   // waiting for the client's next message, nothing half read
	// lost: an ambiguous step's reply was lost (loseReply), and the
	// client's side cut with it: what the session had open is the
	// fault's, not the handler's.
	lost atomic.Bool
	// endedInTx: the session ended in a transaction block (see
	// inTransaction), not by a lost reply. Set by serve before it
	// returns.
	endedInTx bool
	// atStep: serve waits for a step's grant (Hooks.Before), nothing of
	// the step's batch forwarded and every earlier round trip synced.
	atStep atomic.Bool
	// crashed: the delivery died while the connection was parked or at a
	// step; serve rolls its backend back and gives it to Config.Backends
	// rather than cut it (see crash).
	crashed atomic.Bool
	// serverClosed: cut closed the server socket.
	serverClosed atomic.Bool
	// lostKept: an ambiguous step's reply came whole with nothing else
	// out; the client's side is cut, and serve rolls the backend back and
	// gives it to Config.Backends rather than cut it (see loseReply).
	lostKept atomic.Bool
	// cancels counts the client's cancel requests being forwarded to the
	// backend (forwardCancel): a backend is handed on only once they are
	// through, so none lands on its next user's statement.
	cancels sync.WaitGroup

	// Set once by startup, under mu; pid under p.mu by register. server is
	// be.conn until the backend is given back.
	be     *backend
	server net.Conn
	pid    uint32
	probes bool // the server can say whether a transaction wrote (commitprobe.go)
	pool   bool // a connection of the delivery's own pools (mark.go)

	// Owned by the serve goroutine.
	in       *bufio.Reader
	batch    []byte      // client messages not yet forwarded, raw
	lastAt   int         // where the last message read starts in batch
	execs    []*prepared // what the batch's Execute messages run
	prepared map[string]*prepared
	portals  map[string]*prepared
	open     *Step // a step begun at a Flush whose Sync is still to come
	unsynced bool  // messages were forwarded at a Flush, their Sync still to come

	// wmu serialises writes to the server: the serve goroutine forwards
	// the client's messages, and a held step's COMMIT or ROLLBACK comes
	// from the harness or the reader.
	wmu sync.Mutex

	// Shared with the reader goroutine.
	mu      sync.Mutex
	hold    *holdState    // the step held (Hold), until its reply reaches the client
	pending []reply       // round trips forwarded and awaiting ReadyForQuery
	idle    chan struct{} // closed when pending empties, if someone waits
	tx      byte          // transaction status from the last ReadyForQuery
	drop    bool          // an ambiguous step is out: its reply must not reach the client
	done    chan struct{} // closed when the reader ends
	// detaching asks the reader to stop at its read deadline and leave the
	// server socket open; stopped says it did so at a message boundary.
	detaching, stopped bool

	// Owned by the reader goroutine.
	scan     frameScanner
	finished []reply
	out      []byte // what the client gets of the bytes read
	held     []byte // ParseComplete and BindComplete that may be the probe's
}

// prepared is a statement as the client parsed it.
type prepared struct {
	sql   string
	stmts []statement
}

// unknownStatement stands for an Execute of a portal the proxy did not see
// bound: counted as a step that may write.
var unknownStatement = &prepared{sql: "<unknown portal>", stmts: []statement{{keyword: "?"}}}

// reply is a round trip awaiting its ReadyForQuery.
type reply struct {
	step      *Step // nil when the round trip is no step
	err       error // first error the server reported for it
	ambiguous bool
	probe     probeKind // how the step asks the server whether it wrote
	probing   bool      // the probe's replies have begun
	// own marks a round trip the proxy sent itself (the BEGIN, COMMIT or
	// ROLLBACK around a held step): its replies never reach the client.
	own bool
	// held marks the held step's round trip, settles the one that ends
	// its transaction.
	held, settles bool
	status        byte   // the ReadyForQuery's transaction status
	errMsg        []byte // settles: the server's ErrorResponse, whole
}

// holdState is a held step (Hold): its transaction is open on the
// server, and its reply is kept from the client until the transaction
// ends.
type holdState struct {
	step    *Step
	waiting bool   // the statement ran; the commit waits for Proxy.Commit
	ending  bool   // the COMMIT or ROLLBACK is out
	reply   []byte // the statement's reply, for the client once it ends
	err     error  // the statement's error, when it failed
	// orphaned: the client left while the statement ran; it commits as
	// soon as it has run, as autocommit would have.
	orphaned bool
	settled  chan struct{}
}

// queryMessage is a simple Query message of sql.
func queryMessage(sql string) []byte {
	b, _ := (&pgproto3.Query{String: sql}).Encode(nil)
	return b
}

var (
	beginMessage    = queryMessage("BEGIN")
	commitMessage   = queryMessage("COMMIT")
	rollbackMessage = queryMessage("ROLLBACK")
)

func (c *conn) serve() {
	defer c.cut()
	c.in = bufio.NewReaderSize(c.client, 16<<10)
	c.done = make(chan struct{})
	if err := c.startup(); err != nil {
		close(c.done)
		return
	}
	c.prepared = map[string]*prepared{}
	c.portals = map[string]*prepared{}
	c.p.wg.Add(1)
	go c.readServer()
	err := c.relay() // any error ends the connection; the client sees it closed
	c.endedInTx = !c.lost.Load() && c.inTransaction()
	if c.crashed.Load() {
		if be := c.detachCrashed(); be != nil {
			c.p.backends.keep(be)
		}
		return // the deferred cut closes the server socket when it was not detached
	}
	if c.lostKept.Load() {
		if be := c.detachLost(); be != nil {
			c.p.backends.keep(be)
		}
		return // as above
	}
	c.commitOrphanedHold()
	if errors.Is(err, errQuit) || errors.Is(err, errReleased) {
		if be := c.detach(); be != nil {
			c.p.backends.put(be)
		} else if errors.Is(err, errQuit) {
			_ = c.forward() // the client's Terminate
		}
	}
}

// inTransaction reports whether the client's session is in a transaction
// block ('T', or 'E' for a failed one) by the last ReadyForQuery the
// server sent: the status the client itself holds once it has its
// reply, since the proxy records it before passing the reply on. Left
// so, the session's work rolls back. A statement out does not change
// it unless it is the transaction's BEGIN or COMMIT, so a client that
// gave up waiting for one is judged by the status it had. It is false
// for a connection that never became a session, and while a step is
// held or an ambiguous step is out (the status is then the proxy's own
// transaction around it, or the fault's).
func (c *conn) inTransaction() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.be != nil && !c.drop && c.hold == nil && c.tx != 'I'
}

// errQuit and errReleased end relay when the client sent Terminate, or the
// delivery was released while the connection waited for its client: its
// backend may be given back.
var (
	errQuit     = errors.New("the client ended the session")
	errReleased = errors.New("the delivery was released")
)

// detach takes the backend off the connection if it can serve another
// client: nothing is out, no transaction is open, and the reader stopped
// at a message boundary. It returns nil when the backend must be closed.
func (c *conn) detach() *backend {
	if !c.stopReader(func() bool {
		return len(c.pending) == 0 && c.tx == 'I' && !c.drop && c.open == nil && c.hold == nil && !c.isCut.Load()
	}) {
		return nil
	}
	defer c.mu.Unlock()
	if c.isCut.Load() || len(c.pending) > 0 || c.tx != 'I' {
		return nil
	}
	// From here cut leaves the socket alone, and no cancel request of this
	// client reaches the backend's next one.
	c.server = nil
	c.p.unregister(c)
	c.cancels.Wait() // Backends.put resets it next
	return c.be
}

// stopReader stops the connection's reader so that its backend can be
// taken off: can, called with c.mu held, says whether the connection is in
// a state to give it; the reader is then stopped at its next message
// boundary. It returns true with c.mu held once the reader stopped, for
// the caller to check what the reader's last messages changed, and false
// (c.mu not held) when the backend cannot be taken.
func (c *conn) stopReader(can func() bool) bool {
	c.mu.Lock()
	ok := can()
	if ok {
		c.detaching = true
	}
	c.mu.Unlock()
	if !ok || c.server.SetReadDeadline(time.Now()) != nil {
		return false
	}
	<-c.done
	c.mu.Lock()
	if !c.stopped {
		c.mu.Unlock()
		return false
	}
	return true
}

// cut closes both sides of the connection; later writes are refused.
func (c *conn) cut() {
	c.isCut.Store(true)
	c.mu.Lock()
	server := c.server
	c.mu.Unlock()
	_ = c.client.Close()
	if server != nil {
		c.serverClosed.Store(true)
		c.p.noteCut(c)
		_ = server.Close()
	}
}

// crash ends the connection of a delivery that died, as cut does for
// the client, and reports whether its backend can be kept: the
// connection was parked or waiting for a step's grant, so the server is
// between round trips. Its serve goroutine then rolls back what the
// session had open and resets it (detachCrashed): the server's state
// is what a backend that ended at the crash would have left, without
// terminating the backend, waiting for it to go, and starting another
// for the next delivery. Writes are refused from now on, so nothing the
// client sent after the crash reaches the server.
func (c *conn) crash() bool {
	if c.p.backends == nil {
		return false
	}
	if c.crashed.Load() {
		// Crashed already, at a step (the hook's Crash kills the proxy
		// from the serve goroutine): serve is rolling the backend back,
		// and a cut now would close its socket under the rollback.
		return true
	}
	if !c.parked.Load() && !c.atStep.Load() {
		return false
	}
	if !c.crashed.CompareAndSwap(false, true) {
		return true // the serve goroutine's own crash and Kill met
	}
	c.isCut.Store(true)
	_ = c.client.Close()
	return true
}

// detachCrashed takes the backend off a crashed connection once its
// reader stopped at a message boundary with nothing out, after rolling
// back its transaction and resetting its session (ROLLBACK, DISCARD
// ALL). It returns nil when that cannot be done: the deferred cut then
// closes the socket and the harness terminates the backend, as for any
// cut connection.
func (c *conn) detachCrashed() *backend {
	if !c.stopReader(func() bool {
		return len(c.pending) == 0 && !c.drop && c.open == nil && !c.unsynced && c.hold == nil && !c.serverClosed.Load() && c.server != nil
	}) {
		return nil
	}
	defer c.mu.Unlock()
	return c.rollBackAndTake()
}

// rollBackAndTake rolls back and resets, under c.mu, the backend of a
// connection whose reader has stopped, and takes it off the connection;
// it returns nil when the server socket is closed or gone, a round trip
// is still out, or the reset fails.
func (c *conn) rollBackAndTake() *backend {
	if c.serverClosed.Load() || c.server == nil || len(c.pending) > 0 {
		return nil
	}
	c.p.refuseCancels(c)
	c.cancels.Wait()
	if err := c.be.rollback(c.tx != 'I'); err != nil {
		return nil
	}
	c.server = nil
	c.p.unregister(c)
	return c.be
}

// loseReply ends the connection whose ambiguous step's reply has come
// whole, as a network failure would: the client's side is cut, and the
// delivery lives on and may connect again. When nothing else is out
// (no other round trip, no held step), the reader stops here, at a
// message boundary, with the server socket left open and no write of
// the serve goroutine half done or to come: serve then rolls the
// backend back and keeps it (detachLost), leaving the server as it
// would have left a session whose client went away, without
// terminating the backend and starting another for the next delivery.
// Otherwise both sides are cut.
func (c *conn) loseReply(lost *Step) {
	err := fmt.Errorf("%s lost the reply to step %d, and its connection (pid %d) with it", c.p.label, lost.Index, c.pid)
	c.lost.Store(true)
	c.wmu.Lock()
	c.mu.Lock()
	keep := c.p.backends != nil && len(c.pending) == 0 && c.hold == nil && c.scan.nhead == 0 && c.server != nil && !c.isCut.Load()
	if keep {
		c.isCut.Store(true) // writeServer refuses from here
		c.lostKept.Store(true)
	}
	c.mu.Unlock()
	c.wmu.Unlock()
	if !keep {
		c.cut()
		c.endPending(err)
		return
	}
	// The client, seeing its connection go, may send a cancel request
	// (pgx does as it closes): the backend will serve another, so the
	// request goes nowhere, as it would to a session that ended.
	c.p.refuseCancels(c)
	_ = c.client.Close()
	c.endPending(err)
}

// detachLost takes the backend off a connection loseReply kept, once
// serve has stopped reading the client, after rolling back its
// transaction and resetting its session (ROLLBACK, DISCARD ALL). It
// returns nil when that cannot be done (a step begun at a Flush, a
// message forwarded without its Sync): the deferred cut then closes the
// socket and the harness terminates the backend, as for any cut
// connection.
func (c *conn) detachLost() *backend {
	if c.open != nil || c.unsynced {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rollBackAndTake()
}

// testHookLoop and testHookRead, set by tests before a proxy starts, run
// each time the relay loops back to read the client's next message, and
// each time it has read one: a test makes the relay slow there, as a
// loaded machine may.
var (
	testHookLoop func()
	testHookRead func(typ byte)
)

// relay reads the client's messages and forwards them, step by step.
func (c *conn) relay() error {
	for {
		if testHookLoop != nil {
			testHookLoop()
		}
		c.parked.Store(len(c.batch) == 0 && c.open == nil)
		typ, body, err := c.readMessage()
		c.parked.Store(false)
		if err != nil {
			if c.p.releasing.Load() {
				return errReleased
			}
			return err
		}
		if testHookRead != nil {
			testHookRead(typ)
		}
		switch typ {
		case 'P':
			var m pgproto3.Parse
			if err := m.Decode(body); err != nil {
				return err
			}
			c.prepared[m.Name] = &prepared{sql: m.Query, stmts: splitSQL(m.Query)}
		case 'B':
			// Bind starts with the portal and statement names; decoding the
			// whole message (pgproto3.Bind) would copy every parameter.
			portal, rest := cString(body)
			stmt, _ := cString(rest)
			pr := c.prepared[string(stmt)]
			if old, ok := c.portals[string(portal)]; !ok || old != pr {
				c.portals[string(portal)] = pr
			}
		case 'E':
			portal, _ := cString(body)
			pr := c.portals[string(portal)]
			if pr == nil {
				pr = unknownStatement
			}
			c.execs = append(c.execs, pr)
		case 'C':
			var m pgproto3.Close
			if err := m.Decode(body); err != nil {
				return err
			}
			if m.ObjectType == 'S' {
				delete(c.prepared, m.Name)
			} else {
				delete(c.portals, m.Name)
			}
		case 'D':
		case 'S':
			err = c.syncOrFlush(true)
		case 'H':
			err = c.syncOrFlush(false)
		case 'Q':
			var m pgproto3.Query
			if err := m.Decode(body); err != nil {
				return err
			}
			if stmts := splitSQL(m.String); len(stmts) > 0 {
				_, err = c.step(m.String, stmts, probeSimple)
			} else {
				c.expect(nil, false, noProbe)
				err = c.forward()
			}
		case 'F': // function call: a round trip, not counted as a step
			c.expect(nil, false, noProbe)
			err = c.forward()
		case 'X':
			if c.p.backends != nil {
				// serve gives the backend back, or forwards the Terminate;
				// a Release meanwhile need not cut it.
				c.parked.Store(true)
				return errQuit
			}
			_ = c.forward()
			return io.EOF
		default: // copy data, and anything newer: in order, at once
			err = c.forward()
		}
		if err != nil {
			return err
		}
	}
}

// syncOrFlush ends an extended-protocol batch. The batch is a step when it
// executes; a step begun at a Flush stays open until its Sync.
func (c *conn) syncOrFlush(sync bool) error {
	err := c.endBatch(sync)
	if err == nil {
		c.unsynced = !sync // forwarded: a Sync ends what a Flush left open
	}
	return err
}

func (c *conn) endBatch(sync bool) error {
	if c.open != nil {
		if sync {
			c.open = nil
		}
		return c.forward()
	}
	executes := false
	for _, pr := range c.execs {
		if len(pr.stmts) > 0 {
			executes = true
			break
		}
	}
	if !executes {
		if sync {
			c.expect(nil, false, noProbe)
		}
		return c.forward()
	}
	sql, stmts := c.execs[0].sql, c.execs[0].stmts
	if len(c.execs) > 1 {
		var texts []string
		stmts = nil
		for _, pr := range c.execs {
			texts = append(texts, pr.sql)
			stmts = append(stmts, pr.stmts...)
		}
		sql = strings.Join(texts, ";\n")
	}
	// A step begun at a Flush is not asked about: its transaction goes on
	// past its reply.
	probe := noProbe
	if sync {
		probe = probeExtended
	}
	s, err := c.step(sql, stmts, probe)
	if !sync {
		c.open = s
	}
	return err
}

// step asks the harness about a step and forwards the batch, or not. When
// the text cannot tell whether the step writes, the batch asks the server
// too (probe says how the batch ends: a simple query or a Sync).
func (c *conn) step(sql string, stmts []statement, probe probeKind) (*Step, error) {
	if err := c.waitIdle(); err != nil {
		return nil, err
	}
	index, err := c.p.nextStep()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	tx := c.tx
	c.mu.Unlock()
	s := &Step{
		Delivery:      c.p.label,
		Index:         index,
		Conn:          c.id,
		PID:           c.pid,
		SQL:           sql,
		CommitPoint:   commitPoint(stmts, tx),
		InTransaction: tx != 'I',
		Local:         localStatements(stmts),
		Unholdable:    unholdable(stmts, tx),
	}
	switch {
	case !c.probes:
		probe = noProbe
	case c.p.serverOnly.Load() && tx == 'I' && !slices.ContainsFunc(stmts, func(s statement) bool { return txControl[s.keyword] }):
		s.CommitPoint = false
	case !needsProbe(stmts, tx):
		probe = noProbe
	}
	action := Forward
	if c.p.hooks.Before != nil {
		// Until the step is forwarded (or refused), a crash finds the
		// server between round trips: see crash.
		c.atStep.Store(c.open == nil && !c.unsynced)
		defer c.atStep.Store(false)
		action = c.p.hooks.Before(c.p.ctx, *s)
	}
	if dead := c.p.Dead(); dead != nil {
		return nil, dead
	}
	if action == Crash {
		err := fmt.Errorf("%w: %s crashed before step %d", ErrDead, c.p.label, index)
		c.p.kill(err)
		return nil, err
	}
	c.atStep.Store(false)
	c.appendProbe(probe)
	if action == Hold && s.Unholdable == "" {
		c.mu.Lock()
		c.hold = &holdState{step: s, settled: make(chan struct{})}
		c.pending = append(c.pending, reply{own: true}, reply{step: s, probe: probe, held: true})
		c.mu.Unlock()
		c.batch = append(append(make([]byte, 0, len(beginMessage)+len(c.batch)), beginMessage...), c.batch...)
		return s, c.forward()
	}
	c.expect(s, action == Ambiguous, probe)
	return s, c.forward()
}

// commitOrphanedHold commits the held step of a client that left: the
// server would have committed its statement on its own. It waits for the
// commit, at most a second; a delivery killed meanwhile loses it.
func (c *conn) commitOrphanedHold() {
	c.mu.Lock()
	h := c.hold
	if h != nil {
		h.orphaned = true
	}
	c.mu.Unlock()
	if h == nil || c.isCut.Load() {
		return
	}
	c.commitHold()
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-h.settled:
	case <-t.C:
	}
}

// commitHold ends the held step's transaction with COMMIT, once its
// statement has run; it does nothing when no step waits.
func (c *conn) commitHold() {
	c.mu.Lock()
	h := c.hold
	if h == nil || !h.waiting || h.ending {
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.endHold(commitMessage)
}

// endHold sends msg (COMMIT or ROLLBACK) to end the held step's
// transaction; its reply settles the hold (settleHold).
func (c *conn) endHold(msg []byte) {
	c.mu.Lock()
	c.hold.ending = true
	c.pending = append(c.pending, reply{own: true, settles: true})
	c.mu.Unlock()
	if err := c.writeServer(msg); err != nil {
		c.cut() // the reader ends and reports the step
	}
}

// writeServer writes b to the server: the client's batch (forward) or
// the proxy's own COMMIT or ROLLBACK.
func (c *conn) writeServer(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.isCut.Load() { // under wmu: loseReply counts on it
		return net.ErrClosed
	}
	_, err := c.server.Write(b)
	return err
}

// settleHold runs on the reader goroutine when the round trip that
// ended the held step's transaction has its reply: the client gets the
// statement's reply, its ReadyForQuery saying no transaction is open,
// or, when the commit failed, the commit's error in place of its
// CommandComplete... as far as the stream allows: the statement's
// messages, then the error. It returns the step and its error.
func (c *conn) settleHold(r reply) (Step, error) {
	c.mu.Lock()
	h := c.hold
	c.hold = nil
	out := h.reply
	if n := len(out); n >= 6 && out[n-6] == 'Z' {
		out = out[:n-6]
	}
	if r.err != nil && h.err == nil {
		out = append(out, r.errMsg...)
	}
	out = append(out, 'Z', 0, 0, 0, 5, r.status)
	c.out = append(c.out, out...)
	err := h.err
	if err == nil {
		err = r.err
	}
	c.mu.Unlock()
	close(h.settled)
	return *h.step, err
}

// appendProbe adds the probe's question to the batch: to the query string
// of the simple query that ends it, or before the Sync that ends it.
func (c *conn) appendProbe(probe probeKind) {
	switch probe {
	case probeSimple:
		// The Query message is the last one: its string ends with a NUL.
		c.batch = append(c.batch[:len(c.batch)-1], probeSuffix...)
		c.batch = append(c.batch, 0)
		binary.BigEndian.PutUint32(c.batch[c.lastAt+1:], uint32(len(c.batch)-c.lastAt-1))
	case probeExtended:
		c.batch = append(c.batch[:len(c.batch)-5], probeMessages...)
		c.batch = append(c.batch, 'S', 0, 0, 0, 4)
	}
}

// forward writes the pending client messages to the server.
func (c *conn) forward() error {
	err := c.writeServer(c.batch)
	if cap(c.batch) > 1<<20 {
		c.batch = nil // after a large COPY chunk or parameter
	} else {
		c.batch = c.batch[:0]
	}
	c.execs = c.execs[:0]
	return err
}

// readMessage appends the client's next message to the batch and returns
// its type and body (valid until the next read).
func (c *conn) readMessage() (byte, []byte, error) {
	start := len(c.batch)
	c.lastAt = start
	c.batch = append(c.batch, 0, 0, 0, 0, 0)
	if _, err := io.ReadFull(c.in, c.batch[start:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(c.batch[start+1:])) - 4
	if n < 0 || n > maxMessage {
		return 0, nil, fmt.Errorf("invalid message length %d", n)
	}
	c.batch = slices.Grow(c.batch, n)[:start+5+n]
	if _, err := io.ReadFull(c.in, c.batch[start+5:]); err != nil {
		return 0, nil, err
	}
	return c.batch[start], c.batch[start+5:], nil
}

// cString splits a NUL-terminated string off b.
func cString(b []byte) (s, rest []byte) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return b, nil
	}
	return b[:i], b[i+1:]
}

// expect records a forwarded round trip that ends with a ReadyForQuery.
func (c *conn) expect(s *Step, ambiguous bool, probe probeKind) {
	c.mu.Lock()
	c.pending = append(c.pending, reply{step: s, ambiguous: ambiguous, probe: probe})
	if ambiguous {
		c.drop = true
	}
	c.mu.Unlock()
}

// waitIdle waits until every forwarded round trip has its reply, so a step
// starts from a known transaction status and never overlaps the previous
// one (only pipelining clients ever wait here).
func (c *conn) waitIdle() error {
	c.mu.Lock()
	if len(c.pending) == 0 && c.hold == nil {
		c.mu.Unlock()
		return nil
	}
	if c.idle == nil {
		c.idle = make(chan struct{})
	}
	idle := c.idle
	c.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-c.done:
		return net.ErrClosed
	case <-c.p.ctx.Done():
		return c.p.Dead()
	}
}

func (c *conn) appendInFlight(out []Step) []Step {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.pending {
		if r.step != nil {
			out = append(out, *r.step)
		}
	}
	return out
}

// readServer relays the server's replies to the client as they come,
// watching for each round trip's ReadyForQuery.
func (c *conn) readServer() {
	defer c.p.wg.Done()
	defer close(c.done)
	buf := make([]byte, 32<<10)
	server := c.server
	for {
		n, err := server.Read(buf)
		if n > 0 {
			c.mu.Lock()
			c.scan.feed(buf[:n], c)
			if c.hold != nil {
				// The held step's reply waits for its commit.
				c.hold.reply = append(c.hold.reply, c.out...)
				c.out = c.out[:0]
			}
			c.mu.Unlock()
			var lost *Step
			for _, r := range c.finished {
				switch {
				case r.held:
					c.ranHeld(r)
				case r.settles:
					s, err := c.settleHold(r)
					if c.p.hooks.After != nil {
						c.p.hooks.After(s, err)
					}
				case r.step != nil && c.p.hooks.After != nil:
					c.p.hooks.After(*r.step, r.err)
				}
				if r.ambiguous {
					lost = r.step
				}
			}
			c.mu.Lock()
			if len(c.pending) == 0 && c.hold == nil && c.idle != nil {
				close(c.idle)
				c.idle = nil
			}
			c.mu.Unlock()
			c.finished = c.finished[:0]
			if lost != nil {
				c.loseReply(lost)
				return
			}
			if len(c.out) > 0 {
				_, err := c.client.Write(c.out)
				c.out = c.out[:0]
				if err != nil {
					c.cut()
					c.endPending(err)
					return
				}
				if c.inProcess {
					// The client's goroutine was just made runnable: let
					// it run on this thread now rather than after the
					// next Read of the server socket, which only finds it
					// empty (a system call) before this goroutine parks;
					// another thread picks this one up meanwhile.
					runtime.Gosched()
				}
			}
		}
		if err != nil {
			c.mu.Lock()
			if c.detaching && errors.Is(err, os.ErrDeadlineExceeded) && c.scan.nhead == 0 {
				c.stopped = true
				c.mu.Unlock()
				return // detach takes the socket
			}
			c.mu.Unlock()
			c.cut()
			c.endPending(err)
			return
		}
	}
}

// endPending reports the steps whose reply will never come, the held
// one among them.
func (c *conn) endPending(err error) {
	if dead := c.p.Dead(); dead != nil {
		err = dead
	} else if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		err = fmt.Errorf("the server connection of %s (pid %d) closed before the step's reply", c.p.label, c.pid)
	}
	c.mu.Lock()
	rest := c.pending
	c.pending = nil
	h := c.hold
	c.hold = nil
	c.mu.Unlock()
	if h != nil {
		close(h.settled)
		if !slices.ContainsFunc(rest, func(r reply) bool { return r.step == h.step }) && c.p.hooks.After != nil {
			c.p.hooks.After(*h.step, err)
		}
	}
	for _, r := range rest {
		if r.step != nil && c.p.hooks.After != nil {
			c.p.hooks.After(*r.step, err)
		}
	}
}

// ranHeld runs on the reader goroutine when the held step's statement
// has its reply: the step waits for Proxy.Commit, or, when it failed,
// its transaction rolls back at once.
func (c *conn) ranHeld(r reply) {
	c.mu.Lock()
	h := c.hold
	ok := r.err == nil && r.status == 'T'
	if !ok {
		h.err = r.err
		if h.err == nil {
			h.err = fmt.Errorf("%s: step %d ended with transaction status %q, not in the transaction held around it", c.p.label, h.step.Index, r.status)
		}
	}
	h.waiting = ok
	commitNow := h.orphaned
	c.mu.Unlock()
	switch {
	case !ok:
		c.endHold(rollbackMessage)
		return
	case commitNow:
		c.endHold(commitMessage)
		return
	}
	if c.p.hooks.Held != nil {
		c.p.hooks.Held(*h.step)
	}
}

// route decides, under c.mu, at the header of each message from the server,
// whether it streams to the client as it comes (pass) and whether its body
// is collected for frame (keep). While an ambiguous step is out nothing
// passes; while a step's probe may answer, every message is kept whole
// until frame has seen it.
func (c *conn) route(typ byte) (pass, keep bool) {
	if len(c.pending) > 0 && c.pending[0].own {
		return false, typ == 'Z' || typ == 'E'
	}
	if len(c.pending) > 0 && c.pending[0].probe != noProbe {
		return false, true
	}
	return !c.drop, typ == 'Z' || typ == 'E' || typ == 'G'
}

// frame is called under c.mu for every message route kept, once it is
// whole; passed says whether it already went to the client.
func (c *conn) frame(typ byte, body []byte, passed bool) {
	var front *reply
	if len(c.pending) > 0 {
		front = &c.pending[0]
	}
	give := !passed && (front == nil || !front.own)
	if give && front != nil && front.probe != noProbe && typ != 'Z' {
		give = c.probeFilter(front, typ, body)
	}
	switch typ {
	case 'E':
		if front != nil && (front.step != nil || front.own) && front.err == nil {
			var m pgproto3.ErrorResponse
			if err := m.Decode(body); err == nil {
				front.err = pgconn.ErrorResponseToPgError(&m)
			}
			if front.settles {
				front.errMsg = appendMessage(nil, typ, body)
			}
		}
	case 'Z':
		if len(body) == 1 {
			c.tx = body[0]
		}
		if front != nil {
			c.emit(c.held) // held and not the probe's: the client's
			c.held = c.held[:0]
			if len(body) == 1 {
				front.status = body[0]
			}
			c.finished = append(c.finished, *front)
			c.pending = slices.Delete(c.pending, 0, 1)
		}
	}
	// An ambiguous COPY FROM STDIN needs the client's data: the request
	// for it goes through, what follows does not.
	if give && (!c.drop || typ == 'G') {
		c.out = appendMessage(c.out, typ, body)
	}
}

// emit hands bytes to the client, unless an ambiguous step's reply is
// being dropped.
func (c *conn) emit(b []byte) {
	if !c.drop {
		c.out = append(c.out, b...)
	}
}

// probeFilter takes the probe's replies out of a step's stream, reads its
// answer into the step, and says whether the message goes to the client.
// The probe's replies come last, after all of the client's: its
// ParseComplete and BindComplete (extended protocol) are held until the
// next message shows whose they were.
func (c *conn) probeFilter(r *reply, typ byte, body []byte) bool {
	switch {
	case r.probing:
		switch typ {
		case 'D':
			if probeAssigned(body) && r.step != nil {
				r.step.CommitPoint = true
			}
			return false
		case 'C', '3':
			return false
		}
		// An error of the probe's own (which never comes) aborted the
		// client's transaction too: the client must hear of it.
		return true
	case r.probe == probeExtended && (typ == '1' || typ == '2'):
		c.held = appendMessage(c.held, typ, body)
		return false
	case typ == 'T' && isProbeRow(body):
		r.probing = true
		if r.probe == probeExtended && len(c.held) >= 10 {
			c.held = c.held[:len(c.held)-10] // the probe's ParseComplete and BindComplete
		}
	}
	c.emit(c.held)
	c.held = c.held[:0]
	return !r.probing
}

// appendMessage appends a whole message to b.
func appendMessage(b []byte, typ byte, body []byte) []byte {
	b = append(b, typ, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(b[len(b)-4:], uint32(len(body)+4))
	return append(b, body...)
}

// frameScanner finds message boundaries in the server's byte stream,
// streams what route passes into conn.out, and collects the bodies route
// keeps.
type frameScanner struct {
	head  [5]byte
	nhead int
	left  int // body bytes still to come
	pass  bool
	keep  bool
	body  []byte
}

func (s *frameScanner) feed(b []byte, c *conn) {
	for {
		if s.nhead < 5 {
			if len(b) == 0 {
				return
			}
			n := copy(s.head[s.nhead:], b)
			s.nhead += n
			b = b[n:]
			if s.nhead < 5 {
				return
			}
			s.left = max(int(binary.BigEndian.Uint32(s.head[1:]))-4, 0)
			s.pass, s.keep = c.route(s.head[0])
			if s.pass {
				c.out = append(c.out, s.head[:]...)
			}
			s.body = s.body[:0]
		}
		n := min(s.left, len(b))
		if s.keep {
			s.body = append(s.body, b[:n]...)
		}
		if s.pass {
			c.out = append(c.out, b[:n]...)
		}
		s.left -= n
		b = b[n:]
		if s.left > 0 {
			return
		}
		if s.keep {
			c.frame(s.head[0], s.body, s.pass)
		}
		s.nhead = 0
	}
}
