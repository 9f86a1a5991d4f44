package harness_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
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
			assert.True(t, strings.HasPrefix(err.Error(), "[twice] "), err.Error())
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
