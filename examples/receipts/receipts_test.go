package receipts_test

import (
	"context"
	"testing"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/examples/receipts"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
)

// Receipts are at-least-once: a rare duplicate beats a missing receipt.
var config = harness.Config{
	Setup:          []harness.Setup{harness.SQL(receipts.Schema)},
	EffectPolicies: map[string]assert.Policy{"email": assert.AtLeastOnce},
}

var (
	sendThenMark = harness.Job{Name: "receipt-send-then-mark", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return sender(d).SendThenMark(ctx, 9812)
	}}
	markThenSend = harness.Job{Name: "receipt-mark-then-send", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return sender(d).MarkThenSend(ctx, 9812)
	}}
)

// sender wires the job to the delivery: its pool, its mail fake and the
// harness clock, where production passes its pool, its email provider's
// client and time.Now.
func sender(d *harness.Delivery) receipts.Sender {
	return receipts.Sender{DB: d.DB, Mail: mailer{d.Mail()}, Now: d.Now}
}

// mailer sends the job's emails through the harness's mail fake, which
// records each one as an effect.
type mailer struct{ fake *effects.Mailer }

func (m mailer) Send(ctx context.Context, e receipts.Email) error {
	return m.fake.Send(ctx, effects.Email{To: e.To, Subject: e.Subject, Body: e.Body})
}

func TestSendThenMark(t *testing.T) {
	cfg := config
	// After a crash between the send and the mark, the redelivery sends
	// again and records its own time, later on the harness clock: the
	// time of the duplicate at-least-once tolerates.
	cfg.IgnoreColumns = []string{"orders.receipt_sent_at"}
	res := harness.Check(t, sendThenMark, cfg)
	// The duplicates it makes are the tolerated ones: a crash between the
	// send and the mark, or two deliveries at once.
	dups := 0
	for _, s := range res.Scenarios {
		n := 0
		for _, e := range s.Effects {
			if e.Happened() {
				n++
			}
		}
		if n > 1 {
			dups++
		}
	}
	if dups == 0 {
		t.Errorf("no scenario sent a second receipt; the crash between send and mark was not exercised")
	}
}

func TestMarkThenSend(t *testing.T) {
	cfg := config
	cfg.ExpectFinding = "a crash between the mark and the send loses the receipt"
	cfg.ExpectPattern = result.EffectLost
	harness.Check(t, markThenSend, cfg)
}
