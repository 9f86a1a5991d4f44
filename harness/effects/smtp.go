package effects

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"strings"
	"sync"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/runtwice/twice/assert"
)

// SMTPMessage is a message the SMTP sink accepted, the payload of its
// email effect (kind "email"). It holds what makes the message, and
// nothing a mail library draws afresh on every send (Date, Message-ID),
// so the same message sent by two runs of a correct handler is the same
// effect.
type SMTPMessage struct {
	// From is the envelope sender (MAIL FROM): "shop@example.com".
	From string `json:"from"`
	// To are the envelope recipients (RCPT TO), in the order given.
	To []string `json:"to"`
	// Subject is the Subject header, its encoded words decoded.
	Subject string `json:"subject"`
	// Body is the message's body, its transfer encoding (quoted-printable,
	// base64) undone and its line ends made "\n". A multipart body is kept
	// as sent, boundaries included: a library that draws a random
	// boundary needs harness.Config.IgnoreEffectFields or a volatile rule.
	Body string `json:"body"`
}

// smtpMaxMessage bounds a message the sink reads, as real relays do.
const smtpMaxMessage = 32 << 20

// smtpSinks are the SMTP servers of one Log, one per delivery that asked
// for an address. The zero value has none.
type smtpSinks struct {
	mu      sync.Mutex
	ctx     context.Context // cancelled by close: a step waiting for its grant gives up
	cancel  context.CancelFunc
	servers map[*Clients]*smtpSink
	closed  bool
}

// smtpSink is one delivery's SMTP server.
type smtpSink struct {
	c      *Clients
	server *smtp.Server
	addr   string

	// send is held while a message is a step: a delivery takes one step
	// at a time.
	send sync.Mutex

	mu   sync.Mutex
	dead bool // a step was refused because the delivery is dead
}

// SMTPAddr returns the address ("127.0.0.1:41873") of the delivery's
// SMTP sink, a server the job's own SMTP client (net/smtp's SendMail, a
// mail library) sends to as it would to its relay. The sink is started on
// the first call and answers until the scenario ends.
//
// The sink speaks ESMTP without TLS and offers AUTH PLAIN, taking any
// user name and password; net/smtp's PlainAuth sends credentials
// unencrypted only to localhost, and only to the host it dialled, so give
// it the host of this address, "127.0.0.1". Every message the sink
// accepts is an email effect (SMTPMessage, no deduplication) recorded
// with the delivery, and the end of its DATA is a step of the delivery's
// schedule:
//
//   - a crash just before it kills the delivery with the message unsent,
//     and a crash right after it kills the delivery with the message
//     accepted;
//   - under an effect-lost-reply fault the sink accepts the message,
//     records it, and cuts the connection instead of answering: the
//     client's DATA fails as on a timeout or a dropped link, though the
//     message went out;
//   - under an effect-failed fault the sink refuses the message with
//     "451 4.3.0", a transient refusal, or with "550 5.7.1", a permanent
//     one, when Providers.SMTP.PermanentRefusal is set; nothing is sent;
//   - under an effect-slow fault it is as under effect-lost-reply: the
//     answer comes after the client gave up.
//
// A dead delivery's messages are refused (421) and not recorded, and so
// are its later sessions; after the scenario ended nobody listens. When
// the sink cannot start, the scenario is void with an error saying why,
// and SMTPAddr returns an address that refuses connections. A nil
// *Clients returns "".
func (c *Clients) SMTPAddr() string {
	if c == nil {
		return ""
	}
	s, err := c.log.smtp.sink(c)
	if err != nil {
		c.log.fail(err)
		return noSink
	}
	if s == nil {
		return noSink
	}
	return s.addr
}

// noSink is an address nobody listens on: a connection is refused.
const noSink = "127.0.0.1:0"

// sink returns c's server, starting it on the first call; nil once the
// scenario ended and c had none.
func (ss *smtpSinks) sink(c *Clients) (*smtpSink, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s := ss.servers[c]; s != nil || ss.closed {
		return s, nil // after close, a closed server: its address refuses
	}
	if ss.servers == nil {
		ss.ctx, ss.cancel = context.WithCancel(context.Background())
		ss.servers = map[*Clients]*smtpSink{}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("starting delivery %s's SMTP sink on 127.0.0.1: %w", c.label, err)
	}
	s := &smtpSink{c: c, addr: l.Addr().String()}
	s.server = smtp.NewServer(smtp.BackendFunc(func(conn *smtp.Conn) (smtp.Session, error) {
		return s.session(ss.ctx, conn)
	}))
	s.server.Domain = "twice-smtp-sink"
	s.server.AllowInsecureAuth = true
	s.server.MaxMessageBytes = smtpMaxMessage
	s.server.ErrorLog = log.New(io.Discard, "", 0)
	ss.servers[c] = s
	go func() { _ = s.server.Serve(l) }()
	return s, nil
}

// close stops every server; a session still open is cut.
func (ss *smtpSinks) close() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return
	}
	ss.closed = true
	if ss.cancel != nil {
		ss.cancel()
	}
	for _, s := range ss.servers {
		_ = s.server.Close()
	}
}

// errDeadSession is the sink's answer to a session or message of a dead
// delivery.
var errDeadSession = &smtp.SMTPError{
	Code:         421,
	EnhancedCode: smtp.EnhancedCode{4, 3, 0},
	Message:      "this delivery is dead (a fault killed it); the message was not sent",
}

// errRefused is the sink's answer under an effect-failed fault.
var errRefused = &smtp.SMTPError{
	Code:         451,
	EnhancedCode: smtp.EnhancedCode{4, 3, 0},
	Message:      "email provider: the message was refused before it was sent; try again",
}

// errRejected is the sink's answer under an effect-failed fault when
// Providers.SMTP.PermanentRefusal is set.
var errRejected = &smtp.SMTPError{
	Code:         550,
	EnhancedCode: smtp.EnhancedCode{5, 7, 1},
	Message:      "email provider: the message was rejected and not sent; do not retry it as it is",
}

func (s *smtpSink) session(ctx context.Context, conn *smtp.Conn) (smtp.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return nil, errDeadSession
	}
	return &smtpSession{sink: s, ctx: ctx, conn: conn}, nil
}

// smtpSession is one SMTP session of a delivery's sink.
type smtpSession struct {
	sink *smtpSink
	ctx  context.Context
	conn *smtp.Conn
	from string
	to   []string
}

func (s *smtpSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (s *smtpSession) Auth(mech string) (sasl.Server, error) {
	if mech != sasl.Plain {
		return nil, smtp.ErrAuthUnknownMechanism
	}
	return sasl.NewPlainServer(func(identity, username, password string) error { return nil }), nil
}

func (s *smtpSession) Mail(from string, _ *smtp.MailOptions) error {
	s.from = from
	return nil
}

func (s *smtpSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.to = append(s.to, to)
	return nil
}

func (s *smtpSession) Reset() { s.from, s.to = "", nil }

func (s *smtpSession) Logout() error { return nil }

// Data is the step: the message as read is recorded, or refused, as the
// delivery's schedule says.
func (s *smtpSession) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err // too long, or the client went away: nothing was accepted
	}
	msg := parseSMTPMessage(s.from, s.to, raw)
	payload, err := json.Marshal(msg)
	if err != nil {
		err = fmt.Errorf("encoding an SMTP message: %w", err)
		s.sink.c.log.fail(err)
		return err
	}
	s.sink.send.Lock()
	defer s.sink.send.Unlock()
	kind := KindEmail
	if f := s.sink.c.log.smtpCfg.Kind; f != nil {
		kind = cmp.Or(f(msg), KindEmail)
	}
	err = s.sink.c.call(s.ctx, assert.Effect{Kind: kind, Payload: payload}, func() (string, bool, error) {
		return "", false, nil
	})
	var fault *CallError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fault) && fault.Applied:
		// Accepted and recorded; the answer never reaches the client.
		_ = s.conn.Conn().Close()
		return err
	case errors.As(err, &fault) && s.sink.c.log.smtpCfg.PermanentRefusal:
		return errRejected
	case errors.As(err, &fault):
		return errRefused
	default:
		s.sink.mu.Lock()
		s.sink.dead = true
		s.sink.mu.Unlock()
		return errDeadSession
	}
}

// parseSMTPMessage makes the effect's payload of a message as the client
// sent it. A message that is not RFC 5322 is kept whole as its body.
func parseSMTPMessage(from string, to []string, raw []byte) SMTPMessage {
	msg := SMTPMessage{From: from, To: append([]string{}, to...)}
	m, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		msg.Body = lineEnds(string(raw))
		return msg
	}
	subject := m.Header.Get("Subject")
	if dec, err := new(mime.WordDecoder).DecodeHeader(subject); err == nil {
		subject = dec
	}
	msg.Subject = subject
	body, err := io.ReadAll(m.Body)
	if err != nil {
		body = raw
	}
	msg.Body = lineEnds(string(decodeBody(m.Header.Get("Content-Transfer-Encoding"), body)))
	return msg
}

// decodeBody undoes a transfer encoding, or keeps body as sent when it
// does not decode.
func decodeBody(encoding string, body []byte) []byte {
	var r io.Reader
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "quoted-printable":
		r = quotedprintable.NewReader(bytes.NewReader(body))
	case "base64":
		r = base64.NewDecoder(base64.StdEncoding, bytes.NewReader(body)) // it skips line ends
	default:
		return body
	}
	out, err := io.ReadAll(r)
	if err != nil {
		return body
	}
	return out
}

func lineEnds(s string) string { return strings.ReplaceAll(s, "\r\n", "\n") }
