package twicenats_test

import (
	"context"
	"fmt"
	"net"
	"net/smtp"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twicenats "github.com/runtwice/twice/adapters/nats"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// welcome sends a welcome email once per signup: it looks in its table of
// sent emails, sends through the SMTP relay if the signup is not there,
// records it, then acks. A redelivery after a crash finds the row; a
// second delivery while the first is still sending does not.
func welcome(d *harness.Delivery) jetstream.MessageHandler {
	return func(msg jetstream.Msg) {
		ctx := context.Background()
		signup := string(msg.Data())
		var sent bool
		if err := d.DB.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM welcomed WHERE signup = $1)`, signup).Scan(&sent); err != nil {
			_ = msg.Nak()
			return
		}
		if !sent {
			addr := d.SMTPAddr()
			host, _, _ := net.SplitHostPort(addr)
			body := fmt.Appendf(nil, "To: %s\r\nSubject: Welcome\r\n\r\nHello.\r\n", signup)
			if err := smtp.SendMail(addr, smtp.PlainAuth("", "shop", "secret", host), "shop@example.com", []string{signup}, body); err != nil {
				_ = msg.Nak()
				return
			}
			if _, err := d.DB.Exec(ctx, `INSERT INTO welcomed (signup) VALUES ($1)`, signup); err != nil {
				_ = msg.Nak()
				return
			}
		}
		_ = msg.Ack()
	}
}

// A consumer whose SMTP call takes 2s under a BackOff of 1s is still
// sending when the server hands the message out again: the second
// delivery finds no row and sends a second email. With the call taking
// 20ms the first delivery has acked long before, and visibility-timeout
// has no scenario: its timing is the job's, declared in Config.StepTimes.
func TestVisibilityTimeoutFollowsTheSMTPCallsTime(t *testing.T) {
	s := twicenats.Spec{
		Stream:   jetstream.StreamConfig{Name: "SIGNUPS", Subjects: []string{"signups.>"}},
		Consumer: jetstream.ConsumerConfig{BackOff: []time.Duration{time.Second, 10 * time.Second}, MaxDeliver: 5},
		Subject:  "signups.new", Data: []byte("asha@example.com"),
	}
	cfg := func(smtpTakes time.Duration) harness.Config {
		return harness.Config{
			Setup:     []harness.Setup{harness.SQL(`CREATE TABLE welcomed (signup text PRIMARY KEY)`)},
			Faults:    []faults.Fault{faults.CrashBeforeAck(), faults.VisibilityTimeout()},
			StepTimes: []faults.StepTime{{Effect: "email", Takes: smtpTakes}},
		}
	}
	job := twicenats.Job("welcome", s, welcome)

	slow := run(t, job, cfg(2*time.Second))
	require.NotNil(t, slow.Overlap)
	assert.Equal(t, 2, slow.Overlap.In, "the email is the second step: SELECT, email, INSERT")
	var paused []int
	for _, sc := range slow.Scenarios {
		switch sc.Fault {
		case faults.NameCrashBeforeAck:
			assert.Equal(t, result.Idempotent, sc.Verdict, "a redelivery after a crash finds the row: %s", slow)
		case faults.NameVisibilityTimeout:
			paused = append(paused, sc.Schedule.Deliveries[1].After)
			assert.NotEqual(t, result.Idempotent, sc.Verdict, "paused before or after the email is made, before the row is, the second delivery sends one too: %s", slow)
		}
	}
	assert.Equal(t, []int{1, 2}, paused, "paused at the email only, before and after it")
	assert.False(t, slow.Idempotent())

	fast := run(t, job, cfg(20*time.Millisecond))
	require.NotNil(t, fast.Overlap)
	assert.Zero(t, fast.Overlap.In)
	for _, sc := range fast.Scenarios {
		assert.NotEqual(t, faults.NameVisibilityTimeout, sc.Fault, "the job has acked before the BackOff's 1s")
	}
	assert.True(t, fast.Idempotent(), "%s", fast)
}
