// Package verifyemail is a worker in the shape of techschool/simplebank's
// send-verify-email task: the API enqueues it with asynq.ProcessIn(10s)
// after a user signs up, and the worker records a verification code and
// mails the user a link, with no deduplication. It is production code: it
// does not import twice.
package verifyemail

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TypeSendVerifyEmail is the task's type.
const TypeSendVerifyEmail = "task:send_verify_email"

// Schema is the worker's tables.
const Schema = `
CREATE TABLE users (username text PRIMARY KEY, email text NOT NULL);
CREATE TABLE verify_emails (
	id bigserial PRIMARY KEY,
	username text NOT NULL REFERENCES users,
	email text NOT NULL,
	secret_code text NOT NULL
);
INSERT INTO users VALUES ('alice', 'alice@example.com');`

// Payload is the task's payload.
type Payload struct {
	Username string `json:"username"`
}

// NewTask is the task the API enqueues after a sign-up, as simplebank's
// distributor does: due 10 seconds later, on the critical queue.
func NewTask(username string) (*asynq.Task, error) {
	b, err := json.Marshal(Payload{Username: username})
	if err != nil {
		return nil, fmt.Errorf("marshal verify-email payload: %w", err)
	}
	return asynq.NewTask(TypeSendVerifyEmail, b,
		asynq.MaxRetry(10), asynq.ProcessIn(10*time.Second), asynq.Queue("critical")), nil
}

// Mailer sends mail.
type Mailer interface {
	Send(ctx context.Context, to, subject, body string) error
}

// Processor handles the task.
type Processor struct {
	DB   *pgxpool.Pool
	Mail Mailer
}

// ProcessTask inserts a verification code and mails the link: a retry
// inserts another code and sends another mail.
func (p *Processor) ProcessTask(ctx context.Context, t *asynq.Task) error {
	var pl Payload
	if err := json.Unmarshal(t.Payload(), &pl); err != nil {
		return fmt.Errorf("unmarshal payload: %w", asynq.SkipRetry)
	}
	var email string
	if err := p.DB.QueryRow(ctx, `SELECT email FROM users WHERE username = $1`, pl.Username).Scan(&email); err != nil {
		return fmt.Errorf("get user %s: %w", pl.Username, err)
	}
	code := "code-" + pl.Username
	var id int64
	if err := p.DB.QueryRow(ctx, `INSERT INTO verify_emails (username, email, secret_code) VALUES ($1, $2, $3) RETURNING id`,
		pl.Username, email, code).Scan(&id); err != nil {
		return fmt.Errorf("create verify email: %w", err)
	}
	link := fmt.Sprintf("https://bank.example/verify_email?email_id=%d&secret_code=%s", id, code)
	if err := p.Mail.Send(ctx, email, "Welcome to Simple Bank", "Please verify your email: "+link); err != nil {
		return fmt.Errorf("send verify email: %w", err)
	}
	return nil
}
