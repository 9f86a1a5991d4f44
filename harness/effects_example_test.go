package harness_test

import (
	"context"
	"fmt"

	"github.com/runtwice/twice/harness"
)

// SMSClient is the application's own client interface.
type SMSClient interface {
	Send(ctx context.Context, to, text string) error
}

// recordedSMS sends every message through Delivery.Effect: the harness
// records it as an "sms" effect and can kill the delivery just before it
// or right after it was accepted.
type recordedSMS struct {
	d    *harness.Delivery
	next SMSClient // a fake or a sandbox client
}

func (s recordedSMS) Send(ctx context.Context, to, text string) error {
	return s.d.Effect(ctx, "sms", "", map[string]string{"to": to, "text": text},
		func(ctx context.Context) error { return s.next.Send(ctx, to, text) })
}

// discardSMS accepts every message.
type discardSMS struct{}

func (discardSMS) Send(context.Context, string, string) error { return nil }

// sendShippedSMS is the application code under test: it takes the
// interface, not the wrapper.
func sendShippedSMS(ctx context.Context, sms SMSClient, orderID int64) error {
	return sms.Send(ctx, "+31612345678", fmt.Sprintf("Order %d has shipped", orderID))
}

// A handler that uses its own SMS client gets a wrapper that records each
// message; the harness then holds SMS to a policy like its own fakes'.
func ExampleDelivery_Effect() {
	job := harness.Job{
		Name: "order-shipped-sms",
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			return sendShippedSMS(ctx, recordedSMS{d: d, next: discardSMS{}}, 9812)
		},
	}
	_ = job // harness.Check(t, job, cfg) in a test
}
