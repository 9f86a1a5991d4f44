package harness

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Exploration runs each rapid check's schedules through the scenario
// pool together and waits for the last before rapid draws the next, so a
// check must hold several schedules or the pool stands half idle: with
// at most 4 per check it held about 2, and a schedule cost about twice
// its own run on a 2-core machine. rapid draws the count at random (a
// seed per run): with 16 the mean over 100 checks ranged 3.7 to 5.6 in
// six runs, so the test asks 200 and a mean of at least 3, which at 4
// (a mean near 2.2) it cannot reach.
func TestExploreFeedsThePool(t *testing.T) {
	job := Job{Name: "upsert", Handler: func(ctx context.Context, d *Delivery) error {
		_, err := d.DB.Exec(ctx, `INSERT INTO seen (id) VALUES (1) ON CONFLICT DO NOTHING`)
		return err
	}}
	cfg := Config{Setup: []Setup{SQL(`CREATE TABLE seen (id int PRIMARY KEY)`)}}
	x, err := exploreRun(t.Context(), job, cfg, ExploreOptions{Checks: 200}, t.Name())
	require.NoError(t, err)
	require.False(t, x.Failed(), "minimal %v", x.Minimal)
	require.Equal(t, 200, x.Checks)
	require.Positive(t, x.rounds)
	t.Logf("%d schedules drawn in %d rapid checks", x.Checks, x.rounds)
	assert.GreaterOrEqual(t, float64(x.Checks)/float64(x.rounds), 3.0,
		"%d schedules drawn in %d rapid checks", x.Checks, x.rounds)
}
