package harness

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A rapid check's schedules run through the scenario pool together, and
// rapid draws the next check only after the last, so a check must hold
// several schedules (and other streams fill its tail): with at most 4
// per check it held about 2. rapid draws the count at random (a seed per
// run): with 16 the mean over 100 checks ranged 3.7 to 5.6 in six runs,
// so the test asks 200 and a mean of at least 3, which at 4 (a mean near
// 2.2) it cannot reach.
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

// The streams share the pool's width: with -twice.parallel=1 no two
// scenarios' handlers run at once, although four streams draw.
func TestExploreStreamsShareThePool(t *testing.T) {
	t.Setenv(ParallelEnv, "1")
	var mu sync.Mutex
	running := map[string]int{} // handlers in flight by scenario database
	most := 0
	job := Job{Name: "upsert", Handler: func(ctx context.Context, d *Delivery) error {
		var db string
		if err := d.DB.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
			return err
		}
		mu.Lock()
		running[db]++
		most = max(most, len(running))
		mu.Unlock()
		defer func() {
			mu.Lock()
			if running[db]--; running[db] == 0 {
				delete(running, db)
			}
			mu.Unlock()
		}()
		_, err := d.DB.Exec(ctx, `INSERT INTO seen (id) SELECT 1 FROM pg_sleep(0.01) ON CONFLICT DO NOTHING`)
		return err
	}}
	cfg := Config{Setup: []Setup{SQL(`CREATE TABLE seen (id int PRIMARY KEY)`)}}
	require.Greater(t, streams, 1)
	x, err := exploreRun(t.Context(), job, cfg, ExploreOptions{Checks: 60}, t.Name())
	require.NoError(t, err)
	require.False(t, x.Failed(), "minimal %v", x.Minimal)
	assert.Equal(t, 1, most, "scenarios whose handlers ran at once")
}
