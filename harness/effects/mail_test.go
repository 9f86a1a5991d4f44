package effects_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/harness/effects"
)

// Mail has no deduplication: the same email twice is two emails, each
// attributed to the delivery that sent it.
func TestMailerSendsEveryCall(t *testing.T) {
	clock := newClock()
	log := newLog(t, clock, 0)
	first := log.Clients("j1a1w1", "twice-job-1", 1, grantAll{})
	second := log.Clients("j1a2w2", "twice-job-1", 2, grantAll{})
	receipt := effects.Email{To: "asha@example.com", Subject: "Your receipt", Body: "Order 9812: 50 points"}
	ctx := context.Background()

	require.NoError(t, first.Mail().Send(ctx, receipt))
	clock.Advance(time.Hour)
	require.NoError(t, second.Mail().Send(ctx, receipt))
	require.NoError(t, second.Mail().Send(ctx, receipt))

	got := log.Effects()
	require.Len(t, got, 3)
	for i, want := range []struct {
		delivery string
		attempt  int
	}{{"j1a1w1", 1}, {"j1a2w2", 2}, {"j1a2w2", 2}} {
		e := got[i]
		assert.Equal(t, "email", e.Kind)
		assert.Empty(t, e.Key)
		assert.JSONEq(t, `{"to":"asha@example.com","subject":"Your receipt","body":"Order 9812: 50 points"}`, string(e.Payload))
		assert.True(t, e.Happened(), "email %d", i)
		assert.Equal(t, want.delivery, e.Delivery)
		assert.Equal(t, want.attempt, e.Attempt)
	}
	assert.GreaterOrEqual(t, got[1].At.Sub(got[0].At), time.Hour, "entries carry the harness time")
}
