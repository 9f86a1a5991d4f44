package harness_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

const accountsSchema = `
CREATE TABLE accounts (id int PRIMARY KEY, deleted_at timestamptz);
INSERT INTO accounts VALUES (7, NULL), (8, NULL);
`

func now(d *harness.Delivery) any { return d.Now() }

func runRedrive(t *testing.T, job harness.Job) *harness.Result {
	t.Helper()
	cfg := harness.Config{
		Setup:  []harness.Setup{harness.SQL(accountsSchema)},
		Faults: []faults.Fault{faults.Redrive(faults.DefaultRedriveAfter)},
	}
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })
	return res
}

// A soft delete that stamps the time on every delivery moves deleted_at
// when the job is redriven days later: the harness clock makes that
// visible instead of masking deleted_at as noise.
func TestRedriveFindsMovedTimestamp(t *testing.T) {
	job := harness.Job{Name: "soft-delete", Handler: exec(`UPDATE accounts SET deleted_at = $1 WHERE id = 7`, now)}
	res := runRedrive(t, job)
	assert.Empty(t, res.Volatile, "d.Now() is the same in both clean runs")
	var found []string
	for _, sc := range res.Scenarios {
		if sc.Verdict == result.NotIdempotent {
			found = append(found, sc.Schedule.String())
			require.Len(t, sc.StateDiff, 1, sc.Schedule.String())
			assert.Contains(t, sc.StateDiff[0].Diff, "2026-01-04 09:00:00", "the redrive's time, 72h after the start")
		}
	}
	assert.Equal(t, []string{"j1a1w1!crash > +72h j1a2w2"}, found,
		"only where the first delivery's write was durable does the redrive move it")
}

// The same soft delete keeping the first time it was deleted passes
// every redrive, including one whose first delivery died before it wrote
// anything: then the job ran, once, 72h later.
func TestRedrivePassesKeptTimestamp(t *testing.T) {
	job := harness.Job{Name: "soft-delete", Handler: exec(`UPDATE accounts SET deleted_at = COALESCE(deleted_at, $1) WHERE id = 7`, now)}
	res := runRedrive(t, job)
	require.Len(t, res.Scenarios, 2)
	for _, sc := range res.Scenarios {
		assert.Equal(t, result.Idempotent, sc.Verdict, "%s: %v", sc.Schedule, sc.Problems)
	}
}

// Every scenario's clock starts at Config.ClockStart and stands still
// between faults.
func TestClockStartsAtClockStart(t *testing.T) {
	start := time.Date(2030, time.June, 1, 12, 0, 0, 0, time.UTC)
	seen := make(chan time.Time, 8)
	job := harness.Job{Name: "clock", Handler: func(ctx context.Context, d *harness.Delivery) error {
		seen <- d.Now()
		time.Sleep(2 * time.Millisecond) // wall time passes; the harness clock does not
		seen <- d.Now()
		_, err := d.DB.Exec(ctx, `SELECT 1`) // a job that takes no step is refused
		return err
	}}
	s, err := faults.Parse("j1a1w1!crash > +30s j1a2w2")
	require.NoError(t, err)
	res, err := harness.Run(t.Context(), job, harness.Config{ClockStart: start, Faults: []faults.Fault{faults.Replay(s)}, ExpectNoWork: "it reads the clock"})
	require.NoError(t, err)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })
	close(seen)
	var got []time.Time
	for ts := range seen {
		got = append(got, ts)
	}
	later := start.Add(30 * time.Second)
	// Two clean reference runs, then the scenario's two deliveries.
	assert.Equal(t, []time.Time{start, start, start, start, start, start, later, later}, got)
}
