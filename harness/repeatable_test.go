package harness_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twiceassert "github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// Cancelling a subscription twice changes nothing at the provider: with
// the kind repeatable, a job that cancels on every delivery is idempotent;
// held to exactly-once it is not.
func TestRepeatableEffectPolicy(t *testing.T) {
	job := harness.Job{Name: "cancel", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return d.Effect(ctx, "cancel", "", map[string]string{"subscription": "sub_77"}, func(context.Context) error { return nil })
	}}
	for _, tt := range []struct {
		name     string
		policies map[string]twiceassert.Policy
		want     result.Verdict
	}{
		{"exactly once by default", nil, result.NotIdempotent},
		{"repeatable", map[string]twiceassert.Policy{"cancel": twiceassert.Repeatable}, result.Idempotent},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, err := harness.Run(t.Context(), job, harness.Config{
				Faults:         []faults.Fault{faults.RunTwice(), faults.LostAck()},
				EffectPolicies: tt.policies,
			})
			require.NoError(t, err)
			t.Cleanup(func() { res.DropDatabases(context.Background()) })
			require.Len(t, res.Scenarios, 3)
			for _, sc := range res.Scenarios {
				assert.Equal(t, tt.want, sc.Verdict, "%s: %s", sc.Schedule, sc.EffectDiff)
			}
		})
	}
}
