package effects_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/smtp"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/effects"
)

// welcome is a message as a job writes it for net/smtp: a Date and a
// Message-ID drawn on every send, a subject in encoded words and a
// quoted-printable body.
func welcome(id string) []byte {
	return []byte("From: Shop <shop@example.com>\r\n" +
		"To: asha@example.com\r\n" +
		"Date: Tue, 01 Dec 2026 19:00:0" + id + " +0000\r\n" +
		"Message-ID: <" + id + "@example.com>\r\n" +
		"Subject: =?UTF-8?Q?Welcome,_Asha_=E2=9C=93?=\r\n" +
		"MIME-Version: 1.0\r\n" +
		"Content-Type: text/plain; charset=UTF-8\r\n" +
		"Content-Transfer-Encoding: quoted-printable\r\n" +
		"\r\n" +
		"Your account is ready.\r\n" +
		"Price: =E2=82=B9840\r\n")
}

const welcomePayload = `{"from":"shop@example.com","to":["asha@example.com"],"subject":"Welcome, Asha ✓","body":"Your account is ready.\nPrice: ₹840\n"}`

// send is what a job does with net/smtp: PlainAuth for the host it
// dials, then SendMail.
func send(addr string, msg []byte) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	return smtp.SendMail(addr, smtp.PlainAuth("", "shop", "secret", host), "shop@example.com", []string{"asha@example.com"}, msg)
}

// replySteps answers every call with reply, or err, and counts the calls.
type replySteps struct {
	reply effects.Reply
	err   error

	mu     sync.Mutex
	begins int
	ends   int
}

func (s *replySteps) Begin(context.Context, faults.Step) (effects.Reply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.begins++
	return s.reply, s.err
}

func (s *replySteps) End(faults.Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ends++
}

// count returns the number of Ends.
func (s *replySteps) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ends
}

// assertSMTPCode checks that err is the server's reply code, with an
// enhanced status code of the same class.
func assertSMTPCode(t *testing.T, err error, code int) {
	t.Helper()
	var reply *textproto.Error
	require.ErrorAs(t, err, &reply)
	assert.Equal(t, code, reply.Code)
	assert.Contains(t, reply.Msg, fmt.Sprintf("%d.3.0 ", code/100))
}

// Each message net/smtp sends through the sink is one email effect, no
// deduplication, without the headers a send draws afresh; PlainAuth
// works against it on 127.0.0.1.
func TestSMTPSinkRecordsEveryMessage(t *testing.T) {
	log := newLog(t, newClock(), 0)
	t.Cleanup(func() { _ = log.Close() })
	first := log.Clients("j1a1w1", "twice-job-1", 1, grantAll{})
	second := log.Clients("j1a2w2", "twice-job-1", 2, grantAll{})
	require.Equal(t, first.SMTPAddr(), first.SMTPAddr(), "one sink per delivery")
	require.NotEqual(t, first.SMTPAddr(), second.SMTPAddr(), "each delivery has its own sink")

	require.NoError(t, send(first.SMTPAddr(), welcome("1")))
	require.NoError(t, send(second.SMTPAddr(), welcome("2")))
	require.NoError(t, send(second.SMTPAddr(), welcome("3")))

	got := log.Effects()
	require.Len(t, got, 3)
	for i, want := range []struct {
		delivery string
		attempt  int
	}{{"j1a1w1", 1}, {"j1a2w2", 2}, {"j1a2w2", 2}} {
		e := got[i]
		assert.Equal(t, "email", e.Kind)
		assert.Empty(t, e.Key)
		assert.JSONEq(t, welcomePayload, string(e.Payload))
		assert.True(t, e.Happened(), "email %d", i)
		assert.Equal(t, want.delivery, e.Delivery)
		assert.Equal(t, want.attempt, e.Attempt)
	}
	require.NoError(t, log.Err())
}

// net/smtp's PlainAuth sends a password without TLS only to localhost,
// and only to the host it dialled: the sink on 127.0.0.1 advertises AUTH
// PLAIN, net/smtp authenticates, and a PlainAuth made for another host
// name is refused by net/smtp itself, so the address is what to give it.
func TestSMTPSinkPlainAuth(t *testing.T) {
	log := newLog(t, newClock(), 0)
	t.Cleanup(func() { _ = log.Close() })
	addr := log.Clients("j1a1w1", "twice-job-1", 1, grantAll{}).SMTPAddr()

	c, err := smtp.Dial(addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Hello("worker"))
	ok, mechs := c.Extension("AUTH")
	require.True(t, ok, "the sink offers AUTH without TLS")
	assert.Contains(t, mechs, "PLAIN")
	require.NoError(t, c.Auth(smtp.PlainAuth("", "shop", "secret", "127.0.0.1")))

	err = send2(addr, smtp.PlainAuth("", "shop", "secret", "localhost"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "wrong host name", "net/smtp checks the host it dialled")
	assert.Empty(t, log.Effects(), "a refused login sends nothing")
}

func send2(addr string, auth smtp.Auth) error {
	return smtp.SendMail(addr, auth, "shop@example.com", []string{"asha@example.com"}, welcome("1"))
}

// What the client sees under each reply of the DATA step, and what is
// recorded.
func TestSMTPSinkFates(t *testing.T) {
	dead := errors.New("j1a1w1 is dead; the effect was not made")
	tests := []struct {
		name      string
		steps     *replySteps
		errHas    string // in SendMail's error
		code      int    // SendMail's *textproto.Error's code
		recorded  bool
		happened  bool
		replyLost bool
	}{
		{name: "answered", steps: &replySteps{reply: effects.Answered}, recorded: true, happened: true},
		// The sink accepted the message and cut the link instead of
		// answering: net/smtp's DATA fails though the message went out.
		{name: "reply lost", steps: &replySteps{reply: effects.ReplyLost}, errHas: "EOF", recorded: true, happened: true, replyLost: true},
		{name: "refused", steps: &replySteps{reply: effects.Refused}, code: 451, recorded: true},
		{name: "dead", steps: &replySteps{err: dead}, code: 421},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := newLog(t, newClock(), 0)
			t.Cleanup(func() { _ = log.Close() })
			addr := log.Clients("j1a1w1", "twice-job-1", 1, tt.steps).SMTPAddr()
			err := send(addr, welcome("1"))
			switch {
			case tt.code != 0:
				assertSMTPCode(t, err, tt.code)
			case tt.errHas != "":
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.errHas)
			default:
				require.NoError(t, err)
			}
			got := log.Effects()
			if !tt.recorded {
				assert.Empty(t, got)
				assert.Equal(t, 0, tt.steps.count(), "no End after a refused Begin")
				return
			}
			require.Len(t, got, 1)
			assert.JSONEq(t, welcomePayload, string(got[0].Payload))
			assert.Equal(t, tt.happened, got[0].Happened())
			assert.Equal(t, tt.replyLost, got[0].ReplyLost)
			assert.Equal(t, 1, tt.steps.count(), "one End after the one Begin")
		})
	}
}

// Once a step told the sink its delivery is dead, the delivery's later
// sessions are refused at once: no step, nothing recorded.
func TestSMTPSinkRefusesDeadDeliverysSessions(t *testing.T) {
	log := newLog(t, newClock(), 0)
	t.Cleanup(func() { _ = log.Close() })
	steps := &replySteps{err: errors.New("j1a1w1 is dead")}
	addr := log.Clients("j1a1w1", "twice-job-1", 1, steps).SMTPAddr()
	require.Error(t, send(addr, welcome("1")))

	assertSMTPCode(t, send(addr, welcome("2")), 421)
	steps.mu.Lock()
	assert.Equal(t, 1, steps.begins, "the second session took no step")
	steps.mu.Unlock()
	assert.Empty(t, log.Effects())
}

// Close stops the sinks: a late client finds nobody listening, at the
// address it had or at the one a delivery without a sink gets, and the
// log's effects stay readable.
func TestSMTPSinkStopsOnClose(t *testing.T) {
	log := newLog(t, newClock(), 0)
	d := log.Clients("j1a1w1", "twice-job-1", 1, grantAll{})
	addr := d.SMTPAddr()
	require.NoError(t, send(addr, welcome("1")))
	_ = log.Close()
	assert.Equal(t, addr, d.SMTPAddr(), "the address stays, its server is gone")
	require.Error(t, send(addr, welcome("2")))
	late := log.Clients("j1a2w2", "twice-job-1", 2, grantAll{}).SMTPAddr()
	require.Error(t, send(late, welcome("3")), "a sink asked for after the end refuses")
	assert.Len(t, log.Effects(), 1)
	require.NoError(t, log.Err(), "a late handler is refused like a dead one; the run is not void")
}

// The fact the lost reply builds on, shown against net/smtp itself:
// SendMail returns QUIT's error even after the relay accepted the
// message with 250, so a job cannot tell a sent message from an unsent
// one by SendMail's error alone. The relay here answers everything but
// QUIT, where it hangs up.
func TestNetSMTPReportsQuitErrorAfterAcceptedData(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	accepted := make(chan string, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		r := bufio.NewReader(conn)
		reply := func(s string) { _, _ = conn.Write([]byte(s + "\r\n")) }
		reply("220 relay ESMTP")
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			switch cmd := strings.ToUpper(strings.TrimSpace(line)); {
			case strings.HasPrefix(cmd, "EHLO"):
				reply("250 relay")
			case cmd == "DATA":
				reply("354 go ahead")
				var body strings.Builder
				for {
					l, err := r.ReadString('\n')
					if err != nil || l == ".\r\n" {
						break
					}
					body.WriteString(l)
				}
				accepted <- body.String()
				reply("250 2.0.0 queued")
			case cmd == "QUIT":
				return // the reply is lost
			default:
				reply("250 ok")
			}
		}
	}()
	err = smtp.SendMail(l.Addr().String(), nil, "shop@example.com", []string{"asha@example.com"}, welcome("1"))
	require.Error(t, err, "SendMail reports QUIT's failure")
	select {
	case body := <-accepted:
		assert.Contains(t, body, "Your account is ready.", "yet the relay had accepted the message")
	default:
		t.Fatal("the relay never accepted the message")
	}
}

// With Providers.SMTP.PermanentRefusal an effect-failed fault is a
// permanent refusal: net/smtp's SendMail returns the 550, nothing is
// sent.
func TestSMTPSinkPermanentRefusal(t *testing.T) {
	at := time.Date(2026, 10, 12, 9, 0, 0, 0, time.UTC)
	log, err := effects.NewLog(func() time.Time { return at }, effects.Providers{SMTP: effects.SMTPProvider{PermanentRefusal: true}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = log.Close() })
	addr := log.Clients("j1a1w1", "twice-job-1", 1, &replySteps{reply: effects.Refused}).SMTPAddr()
	err = send(addr, welcome("1"))
	var reply *textproto.Error
	require.ErrorAs(t, err, &reply)
	assert.Equal(t, 550, reply.Code)
	assert.Contains(t, reply.Msg, "5.7.1 email provider")
	got := log.Effects()
	require.Len(t, got, 1)
	assert.False(t, got[0].Happened())
}

// Providers.SMTP.Kind names each message's kind from the message, so a
// welcome email and a receipt can have policies of their own; "" from it
// is "email".
func TestSMTPSinkKindPerPurpose(t *testing.T) {
	at := time.Date(2026, 10, 12, 9, 0, 0, 0, time.UTC)
	kind := func(m effects.SMTPMessage) string {
		if strings.HasPrefix(m.Subject, "Welcome") {
			return "welcome"
		}
		return ""
	}
	log, err := effects.NewLog(func() time.Time { return at }, effects.Providers{SMTP: effects.SMTPProvider{Kind: kind}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = log.Close() })
	addr := log.Clients("j1a1w1", "twice-job-1", 1, &replySteps{}).SMTPAddr()
	require.NoError(t, send(addr, welcome("1")))
	require.NoError(t, send(addr, []byte("Subject: Your receipt\r\n\r\nTotal: 84.00\r\n")))
	var kinds []string
	for _, e := range log.Effects() {
		kinds = append(kinds, e.Kind)
	}
	assert.Equal(t, []string{"welcome", effects.KindEmail}, kinds)
}
