package wireproxy

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/runtwice/twice/internal/blame"
)

// Request codes of the untyped first packets (PostgreSQL protocol 3.0).
const (
	cancelRequestCode = 80877102
	sslRequestCode    = 80877103
	gssEncRequestCode = 80877104
)

// errNotSession ends a connection that was no session (a cancel request or
// a refused startup); it is no failure of the proxy.
var errNotSession = errors.New("not a session")

// startup answers the client's first packets and, for a session, opens the
// server connection. It returns errNotSession when the connection was a
// cancel request or was refused.
func (c *conn) startup() error {
	for {
		body, err := c.readStartupPacket()
		if err != nil {
			return err
		}
		switch binary.BigEndian.Uint32(body) {
		case sslRequestCode, gssEncRequestCode:
			// Decline encryption on loopback; the client goes on in plain text.
			if _, err := c.client.Write([]byte{'N'}); err != nil {
				return err
			}
		case cancelRequestCode:
			var req pgproto3.CancelRequest
			if err := req.Decode(body); err != nil {
				return err
			}
			c.forwardCancel(&req)
			return errNotSession
		case pgproto3.ProtocolVersion30, pgproto3.ProtocolVersion32:
			var msg pgproto3.StartupMessage
			if err := msg.Decode(body); err != nil {
				return err
			}
			return c.openSession(&msg)
		default:
			return fmt.Errorf("unknown startup packet code %d", binary.BigEndian.Uint32(body))
		}
	}
}

func (c *conn) readStartupPacket() ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(c.in, head[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(head[:])) - 4
	if n < 4 || n > 10000 {
		return nil, fmt.Errorf("invalid startup packet length %d", n)
	}
	body := make([]byte, n)
	_, err := io.ReadFull(c.in, body)
	return body, err
}

// forwardCancel sends a CancelRequest for one of this delivery's backends
// to the server; requests with unknown keys are dropped, as the server does.
func (c *conn) forwardCancel(req *pgproto3.CancelRequest) {
	target := c.p.cancelTarget(req.ProcessID, req.SecretKey)
	if target == nil {
		return
	}
	defer target.cancels.Done()
	ctx, cancel := context.WithTimeout(c.p.ctx, 30*time.Second)
	defer cancel()
	_ = target.be.canceler.CancelRequest(ctx) // as with the server, the client learns nothing
}

// openSession connects to the server for the client's startup message, then tells
// the client it is authenticated, relaying the server's parameters.
func (c *conn) openSession(msg *pgproto3.StartupMessage) error {
	p := c.p
	if dead := p.Dead(); dead != nil {
		return c.refuseDead(dead)
	}
	up := p.upstream
	user := msg.Parameters["user"]
	database := msg.Parameters["database"]
	if database == "" {
		database = user
	}
	if user != up.User || database != up.Database {
		return c.refuse("28000", fmt.Sprintf("the proxy of %s serves user %q, database %q; this connection asked for user %q, database %q: connect with the DSN the harness gave the delivery",
			p.label, up.User, up.Database, user, database))
	}
	if _, ok := msg.Parameters["replication"]; ok {
		return c.refuse("0A000", fmt.Sprintf("the proxy of %s does not relay replication connections", p.label))
	}

	pool := marked(msg.Parameters)
	var unknownOptions []string
	params := make(map[string]string, len(msg.Parameters))
	for k, v := range msg.Parameters {
		switch {
		case k == "user" || k == "database":
		case strings.HasPrefix(k, "_pq_."):
			unknownOptions = append(unknownOptions, k)
		default:
			params[k] = v
		}
	}
	key := poolKey(p.upstreamString, params)
	var be *backend
	if p.backends != nil {
		be = p.backends.take(key)
	}
	if be == nil {
		var err error
		if be, err = c.connect(key, params); err != nil {
			return err
		}
	}

	var secret [4]byte
	_, _ = rand.Read(secret[:])
	c.mu.Lock()
	if c.isCut.Load() {
		c.mu.Unlock()
		_ = be.conn.Close()
		return c.refuseDead(p.Dead())
	}
	c.be, c.server, c.tx, c.probes = be, be.conn, 'I', be.probes
	c.pool = pool
	c.mu.Unlock()
	if err := p.register(c, be.pid, secret); err != nil {
		return c.refuseDead(err)
	}

	var out []byte
	if msg.ProtocolVersion != pgproto3.ProtocolVersion30 || len(unknownOptions) > 0 {
		out, _ = (&pgproto3.NegotiateProtocolVersion{NewestMinorProtocol: 0, UnrecognizedOptions: unknownOptions}).Encode(out)
	}
	out, _ = (&pgproto3.AuthenticationOk{}).Encode(out)
	for k, v := range be.params {
		out, _ = (&pgproto3.ParameterStatus{Name: k, Value: v}).Encode(out)
	}
	out, _ = (&pgproto3.BackendKeyData{ProcessID: be.pid, SecretKey: secret[:]}).Encode(out)
	out, _ = (&pgproto3.ReadyForQuery{TxStatus: 'I'}).Encode(out)
	_, err := c.client.Write(out)
	return err
}

// connect opens a new backend for the client's startup parameters. On
// failure it has told the client why, and returns errNotSession.
func (c *conn) connect(key string, params map[string]string) (*backend, error) {
	p := c.p
	cfg := p.upstream.Copy()
	cfg.RuntimeParams = make(map[string]string, len(p.upstream.RuntimeParams)+len(params))
	for k, v := range p.upstream.RuntimeParams {
		cfg.RuntimeParams[k] = v
	}
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	pg, err := pgconn.ConnectConfig(p.ctx, cfg)
	if err != nil {
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
			return nil, c.refuseWith(&pgproto3.ErrorResponse{Severity: pgErr.Severity, SeverityUnlocalized: pgErr.SeverityUnlocalized,
				Code: pgErr.Code, Message: pgErr.Message, Detail: pgErr.Detail, Hint: pgErr.Hint})
		}
		if dead := p.Dead(); dead != nil {
			return nil, c.refuseDead(dead)
		}
		return nil, c.refuse("08001", fmt.Sprintf("internal: the proxy of %s cannot reach the server: %v", p.label, err))
	}
	if err := pg.SyncConn(p.ctx); err != nil {
		_ = pg.Conn().Close()
		return nil, c.refuse("08001", fmt.Sprintf("internal: the proxy of %s cannot take over its server connection: %v", p.label, err))
	}
	hc, err := pg.Hijack()
	if err != nil {
		_ = pg.Conn().Close()
		return nil, c.refuse("08001", fmt.Sprintf("internal: the proxy of %s cannot take over its server connection: %v", p.label, err))
	}
	// A PgConn over the same socket, never read or written, only to send
	// cancel requests the way pgconn does (TLS, unix sockets).
	canceler, err := pgconn.Construct(hc)
	if err != nil {
		_ = hc.Conn.Close()
		return nil, c.refuse("08001", fmt.Sprintf("internal: the proxy of %s cannot take over its server connection: %v", p.label, err))
	}
	if hc.TxStatus != 'I' {
		_ = hc.Conn.Close()
		return nil, c.refuse("08001", fmt.Sprintf("internal: the proxy of %s got a new server connection in transaction status %q", p.label, hc.TxStatus))
	}
	if p.backends != nil {
		p.backends.opened()
	}
	statuses := make(map[string]string, len(hc.ParameterStatuses))
	for k, v := range hc.ParameterStatuses {
		statuses[k] = v
	}
	return &backend{key: key, conn: hc.Conn, canceler: canceler, pid: hc.PID, params: statuses,
		probes: canProbe(hc.ParameterStatuses["server_version"])}, nil
}

// refuseDead refuses a connection of a dead delivery and tells the
// harness (Hooks.Refused): a handler that keeps reconnecting is retrying a
// database it will never reach again.
func (c *conn) refuseDead(why error) error {
	if c.p.hooks.Refused != nil && why != nil {
		c.p.hooks.Refused(why)
	}
	return c.refuse("08004", fmt.Sprintf("%v: its connections are refused", why))
}

// refuse sends the client a FATAL error and ends the connection. It is
// where the proxy's own refusal reaches the handler, through its driver:
// the message gets the tag there, once, so the handler's log says whose
// refusal it is. (A server's error the proxy passes on is sent as it is.)
func (c *conn) refuse(code, message string) error {
	return c.refuseWith(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: blame.Tag + " " + message})
}

func (c *conn) refuseWith(e *pgproto3.ErrorResponse) error {
	if e.Severity == "" {
		e.Severity, e.SeverityUnlocalized = "FATAL", "FATAL"
	}
	out, err := e.Encode(nil)
	if err == nil {
		_, _ = c.client.Write(out)
	}
	return errNotSession
}
