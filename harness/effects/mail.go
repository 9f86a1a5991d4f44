package effects

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/runtwice/twice/assert"
)

// The kinds of effect the fakes make, as Config.EffectPolicies and
// IgnoreEffectFields name them; an HTTP host's kind is its HTTPHost.Kind,
// and Delivery.Effect's the one given.
const (
	KindEmail   = "email"   // Mailer.Send and the SMTP sink
	KindPayment = "payment" // Payments.Pay
)

// Email is a message the mail fake sends. It is the effect's payload, kind
// "email" (KindEmail).
type Email struct {
	To      string `json:"to"`      // the recipient: "asha@example.com"
	Subject string `json:"subject"` // the subject line
	Body    string `json:"body"`    // the text
}

// Mailer is an email provider without deduplication, like most: every
// Send is one more email. A handler gets it from harness.Delivery.Mail.
type Mailer struct {
	c *Clients
}

// Send sends e. Each call is a step of the delivery: a fault can kill the
// delivery just before it, and then nothing is sent, or right after the
// email was accepted; or the provider can send it and lose its answer, or
// refuse it with a 503 before sending, and Send returns a *CallError while
// the delivery goes on. Two calls send two emails.
func (m *Mailer) Send(ctx context.Context, e Email) error {
	if m == nil || m.c == nil {
		return errNoFakes("Mailer.Send")
	}
	raw, err := json.Marshal(e)
	if err != nil {
		err = fmt.Errorf("encoding an email: %w", err)
		m.c.log.fail(err)
		return err
	}
	return m.c.call(ctx, assert.Effect{Kind: KindEmail, Payload: raw}, func() (string, bool, error) {
		return "", false, nil
	})
}
