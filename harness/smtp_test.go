package harness_test

import (
	"context"
	"errors"
	"net"
	"net/smtp"
	"net/textproto"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

// sendWelcome sends one email to the delivery's SMTP sink with net/smtp
// and PlainAuth, as a job does.
func sendWelcome(d *harness.Delivery) error {
	addr := d.SMTPAddr()
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	msg := "From: shop@example.com\r\nTo: asha@example.com\r\nSubject: Welcome\r\n\r\nYour account is ready.\r\n"
	return smtp.SendMail(addr, smtp.PlainAuth("", "shop", "secret", host), "shop@example.com", []string{"asha@example.com"}, []byte(msg))
}

// A delivery a crash killed at its statement, whose handler ignores the
// error and goes on, has its SMTP messages refused (421) and not
// recorded, its second session too; the queue's retry sends the one
// email the scenario holds.
func TestDeadDeliverysSMTPIsRefused(t *testing.T) {
	var mu sync.Mutex
	var deadErrs []error // the sends of a delivery whose statement failed
	job := harness.Job{Name: "smtp-after-crash", Handler: func(ctx context.Context, d *harness.Delivery) error {
		_, dbErr := d.DB.Exec(ctx, `UPDATE tasks SET done = true WHERE id = 1`)
		// The handler ignores dbErr: a dead delivery's worker that goes on.
		first := sendWelcome(d)
		second := sendWelcome(d)
		if dbErr != nil {
			mu.Lock()
			deadErrs = append(deadErrs, first, second)
			mu.Unlock()
		}
		return errors.Join(dbErr, first, second)
	}}
	res, err := harness.Run(context.Background(), job, harness.Config{
		Setup:  []harness.Setup{harness.SQL(tasksSchema)},
		Faults: []faults.Fault{faults.CrashAt(1)},
	})
	require.NoError(t, err)
	require.Len(t, res.Scenarios, 1)
	s := res.Scenarios[0]

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, deadErrs, 2, "the dead delivery's handler went on to send")
	for i, err := range deadErrs {
		var reply *textproto.Error
		if assert.ErrorAs(t, err, &reply, "send %d of the dead delivery", i+1) {
			assert.Equal(t, 421, reply.Code, "send %d of the dead delivery: %v", i+1, err)
		}
	}
	require.Len(t, s.Effects, 2, "the retry's two emails, none of the dead delivery's: %v", s.Effects)
	for _, e := range s.Effects {
		assert.Equal(t, 2, e.Attempt, "only the retry's emails are recorded: %v", e)
		assert.True(t, e.Happened())
	}
}
