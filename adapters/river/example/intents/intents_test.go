package intents_test

import (
	"context"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"

	twiceriver "github.com/runtwice/twice/adapters/river"
	"github.com/runtwice/twice/adapters/river/example/intents"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// As production's start-up does: stripe-go's global backend, on its own
// default HTTP client, which twice routes to the calling delivery.
func init() {
	stripe.Key = "sk_test_twice"
	stripe.DefaultLeveledLogger = &stripe.LeveledLogger{Level: stripe.LevelNull}
}

func job(passContext bool) harness.Job {
	return twiceriver.Job("create-intent", intents.CreateIntentArgs{PaymentID: 7},
		func(d *harness.Delivery) river.Worker[intents.CreateIntentArgs] {
			return &intents.CreateIntentWorker{Pool: d.DB, PassContext: passContext}
		})
}

var config = harness.Config{
	Setup:  []harness.Setup{harness.SQL(intents.Schema)},
	Faults: []faults.Fault{faults.VisibilityTimeout()},
}

// byPause is each visibility-timeout schedule's verdict by the steps the
// first attempt had done when River cancelled it.
func byPause(t *testing.T, passContext bool) (map[int]result.Scenario, *harness.Result) {
	t.Helper()
	res, err := harness.Run(context.Background(), job(passContext), config)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	out := map[int]result.Scenario{}
	for _, s := range res.Scenarios {
		out[s.Schedule.Deliveries[1].After] = s
	}
	return out, res
}

// River cancels the first attempt at its timeout, and the rescued second
// attempt runs whole. Paused after it marked the payment (step 2), the
// cancelled attempt, whose process lives, goes on to create a second
// intent with stripe-go, which was handed no context; paused after its
// call (step 3), the rescued attempt finds no intent recorded and
// creates another. Both pauses make two intents.
func TestIntentWithoutContextUnderVisibilityTimeout(t *testing.T) {
	got, res := byPause(t, false)
	for _, pause := range []int{2, 3} {
		s, ok := got[pause]
		require.True(t, ok, "no visibility-timeout schedule pauses after step %d: %s", pause, res)
		assert.NotEqual(t, result.Idempotent, s.Verdict, "pause after step %d: %s", pause, res)
		require.NotNil(t, s.EffectDiff, "pause after step %d: %s", pause, res)
		assert.Equal(t, 1, s.EffectDiff.Extra, "pause after step %d makes a second intent: %s", pause, res)
	}
	assert.Equal(t, "j1a1w1", got[2].Culprits[0].Delivery.Label(), "after step 2 the cancelled attempt makes the second intent: %+v", got[2].Culprits)
}

// Handed the context, the cancelled attempt's call fails once River
// cancelled it: paused after step 2 it makes no second intent. Paused
// after its call (step 3) the rescued attempt still creates another,
// the intent carrying no key.
func TestIntentWithContextUnderVisibilityTimeout(t *testing.T) {
	got, res := byPause(t, true)
	require.Contains(t, got, 2)
	assert.Equal(t, result.Idempotent, got[2].Verdict, "pause after step 2: the cancelled call fails: %s", res)
	require.Contains(t, got, 3)
	assert.NotEqual(t, result.Idempotent, got[3].Verdict, "pause after step 3: the rescued attempt creates another intent: %s", res)
}
