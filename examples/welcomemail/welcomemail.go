// Package welcomemail holds a job that activates a user's account and
// sends the welcome email over SMTP with net/smtp, as production code
// does, to a relay that does not deduplicate: every message it accepts
// is one more email in the user's inbox.
//
// SendEveryTime activates and sends: every redelivery (a lost ack, a
// crash before the ack, a redrive) sends the email again. SendOnce
// records the email in an outbox row in the same transaction as the
// activation, sends only while that row says it is unsent, and marks it
// sent after the relay accepted it: a crash between the send and the
// mark, or a relay's lost reply, sends a rare duplicate, and the email
// is never lost (at-least-once, what a welcome email wants).
package welcomemail

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/smtp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema is one user waiting for activation, and the outbox that
// remembers the emails the job has sent.
const Schema = `
CREATE TABLE users (
  id           bigint PRIMARY KEY,
  email        text   NOT NULL,
  name         text   NOT NULL,
  activated_at timestamptz
);
CREATE TABLE outbox (
  user_id bigint NOT NULL REFERENCES users (id),
  kind    text   NOT NULL,
  sent_at timestamptz,
  PRIMARY KEY (user_id, kind)
);
INSERT INTO users (id, email, name) VALUES (42, 'asha@example.com', 'Asha');
`

// Relay is where the job sends its email: the SMTP relay's address
// ("smtp.example.com:587") and the account the job logs in with.
type Relay struct {
	Addr     string
	Username string
	Password string
	From     string
}

// Send sends one plain-text message through the relay with net/smtp,
// logging in with AUTH PLAIN when a user name is set. Like most mail
// code it dates the message and gives it a fresh Message-ID.
func (r Relay) Send(to, subject, body string) error {
	host, _, err := net.SplitHostPort(r.Addr)
	if err != nil {
		return fmt.Errorf("welcomemail: relay address %q: %w", r.Addr, err)
	}
	var auth smtp.Auth
	if r.Username != "" {
		auth = smtp.PlainAuth("", r.Username, r.Password, host)
	}
	msg := strings.Join([]string{
		"From: " + r.From,
		"To: " + to,
		"Subject: " + subject,
		"Date: " + time.Now().Format(time.RFC1123Z),
		"Message-ID: <" + rand.Text() + "@" + host + ">",
		"MIME-Version: 1.0",
		"Content-Type: text/plain; charset=UTF-8",
		"",
		body,
	}, "\r\n")
	return smtp.SendMail(r.Addr, auth, r.From, []string{to}, []byte(msg))
}

// Welcomer activates users and welcomes them.
type Welcomer struct {
	DB    *pgxpool.Pool
	Relay Relay
	// Now is the time recorded as activated_at and sent_at; nil means
	// time.Now.
	Now func() time.Time
}

func (w Welcomer) now() time.Time {
	if w.Now == nil {
		return time.Now()
	}
	return w.Now()
}

func welcome(name string) (subject, body string) {
	return "Welcome, " + name, "Hello " + name + ",\r\n\r\nYour account is ready.\r\n"
}

// SendEveryTime activates the user and sends the welcome email, on every
// delivery.
func (w Welcomer) SendEveryTime(ctx context.Context, userID int64) error {
	var email, name string
	err := w.DB.QueryRow(ctx, `
UPDATE users SET activated_at = COALESCE(activated_at, $2)
WHERE id = $1
RETURNING email, name`, userID, w.now()).Scan(&email, &name)
	if err != nil {
		return err
	}
	subject, body := welcome(name)
	return w.Relay.Send(email, subject, body)
}

// SendOnce activates the user and, in the same transaction, puts the
// welcome email in the outbox; then it sends the email unless the outbox
// says it went out, and marks it sent.
func (w Welcomer) SendOnce(ctx context.Context, userID int64) error {
	email, name, sent, err := w.activate(ctx, userID)
	if err != nil || sent {
		return err
	}
	subject, body := welcome(name)
	if err := w.Relay.Send(email, subject, body); err != nil {
		return err
	}
	_, err = w.DB.Exec(ctx, `
UPDATE outbox SET sent_at = $2
WHERE user_id = $1 AND kind = 'welcome' AND sent_at IS NULL`, userID, w.now())
	return err
}

// activate activates the user and records the welcome email in the
// outbox, one transaction, and says whether it was sent before.
func (w Welcomer) activate(ctx context.Context, userID int64) (email, name string, sent bool, err error) {
	err = pgx.BeginFunc(ctx, w.DB, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
UPDATE users SET activated_at = COALESCE(activated_at, $2)
WHERE id = $1
RETURNING email, name`, userID, w.now()).Scan(&email, &name)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO outbox (user_id, kind) VALUES ($1, 'welcome')
ON CONFLICT (user_id, kind) DO NOTHING`, userID); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `
SELECT sent_at IS NOT NULL FROM outbox WHERE user_id = $1 AND kind = 'welcome'`, userID).Scan(&sent)
	})
	return email, name, sent, err
}
