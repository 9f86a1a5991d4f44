package harness_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twiceassert "github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
)

// A Delivery the harness did not make has no fakes: every way in says so
// instead of panicking.
func TestDeliveryWithoutTheHarnessHasNoFakes(t *testing.T) {
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"effect on a bare Delivery", func() error { return (&harness.Delivery{}).Effect(ctx, "sms", "", nil, ok) }, `Delivery.Effect: this Delivery was not made by the harness`},
		{"effect on a nil Delivery", func() error { return (*harness.Delivery)(nil).Effect(ctx, "sms", "", nil, ok) }, `not made by the harness`},
		{"mail on a bare Delivery", func() error { return (&harness.Delivery{}).Mail().Send(ctx, effects.Email{To: "a@b"}) }, `Mailer.Send: this Delivery was not made by the harness`},
		{"mail on a nil Delivery", func() error { return (*harness.Delivery)(nil).Mail().Send(ctx, effects.Email{To: "a@b"}) }, `Mailer.Send: this Delivery was not made by the harness`},
		{"payment on a bare Delivery", func() error {
			_, err := (&harness.Delivery{}).Payments().Pay(ctx, effects.PaymentRequest{Destination: "acct_1", Amount: 1, Currency: "eur"})
			return err
		}, `Payments.Pay: this Delivery was not made by the harness`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			require.Error(t, err)
			assert.True(t, blame.IsUser(err), "error %q is not the user's", err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// Config.Providers reaches the payment provider of every scenario: a
// redrive 72h after a crash between the payment and its record pays twice
// when keys are forgotten after Stripe's 24h, and is answered from the
// key when the provider remembers them longer.
func TestProvidersSetThePaymentKeyWindow(t *testing.T) {
	tests := []struct {
		name    string
		window  time.Duration
		verdict result.Verdict
		paid    int
	}{
		{"Stripe's 24h", 0, result.NotIdempotent, 2},
		{"a week", 7 * 24 * time.Hour, result.Idempotent, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var saw sawCalls
			job := harness.Job{Name: "pay", Handler: payThenLog(&saw, false)}
			sc := replay(t, job, "j1a1w1!crash:2 > +72h j1a2w2", func(cfg *harness.Config) {
				cfg.Providers.Payments.KeyWindow = tt.window
			}).Scenarios[0]
			assert.Equal(t, tt.verdict, sc.Verdict, "%+v", sc)
			paid := 0
			for _, e := range sc.Effects {
				if e.Kind == "payment" && e.Happened() {
					paid++
				}
			}
			assert.Equal(t, tt.paid, paid, "payments made")
		})
	}
}

// A setting no provider can have fails the check at once, naming it.
func TestProvidersMisuse(t *testing.T) {
	job := harness.Job{Name: "pay", Handler: func(ctx context.Context, d *harness.Delivery) error { return nil }}
	cfg := harness.Config{Providers: effects.Providers{Payments: effects.PaymentProvider{KeyWindow: -time.Hour}}}
	_, err := harness.Run(t.Context(), job, cfg)
	require.Contains(t, blame.Message(err), "[twice] Config.Providers.Payments.KeyWindow is -1h0m0s")
}

// A job whose only record of its email is the queue's ack (a digest, with
// nothing in the database) is at-least-once: the duplicate a redelivery
// of the job makes after a crash before the ack, a lost ack or a redrive
// is the window the ack leaves, and passes under assert.AckRecorded; the
// one a producer's copy or an overlapping delivery makes is found.
func TestAckRecordedEffect(t *testing.T) {
	job := harness.Job{Name: "weekly-digest", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return d.Mail().Send(ctx, effects.Email{To: "alice@example.com", Subject: "Your week"})
	}}
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(`CREATE TABLE digests (week text)`)},
		EffectPolicies: map[string]twiceassert.Policy{effects.KindEmail: twiceassert.AckRecorded},
		Faults: []faults.Fault{faults.RunTwice(), faults.CrashBeforeAck(), faults.LostAck(), faults.Redrive(72 * time.Hour),
			faults.ProducerRetry(), faults.ConcurrentDelivery()}}
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	found := map[faults.Name]bool{}
	for _, s := range res.Scenarios {
		found[s.Fault] = found[s.Fault] || s.Verdict != result.Idempotent
	}
	assert.Equal(t, map[faults.Name]bool{
		faults.NameRunTwice: false, faults.NameCrashBeforeAck: false, faults.NameLostAck: false, faults.NameRedrive: false,
		faults.NameProducerRetry: true, faults.NameConcurrentDelivery: true,
	}, found, "%s", res)
}
