package harness_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/recordtb"
)

// A handler whose two clean reference runs differ in what they do, not
// only in a value, had every column of the table it wrote only sometimes
// taken as volatile, and a pass said nothing of it. The check now warns
// with how the runs differed (issue 27).
func TestCleanRunsThatDisagreeAreWarned(t *testing.T) {
	var calls atomic.Int64
	job := harness.Job{Name: "odd-calls", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if calls.Add(1)%2 == 0 {
			return nil
		}
		_, err := d.DB.Exec(ctx, `INSERT INTO marks (n) VALUES (1)`)
		return err
	}}
	rec := recordtb.New(t)
	var res *harness.Result
	rec.Run(func(tb testing.TB) {
		res = harness.Check(tb, job, harness.Config{
			Setup:  []harness.Setup{harness.SQL(`CREATE TABLE marks (n int NOT NULL)`)},
			Faults: []faults.Fault{faults.RunTwice()},
			// Its second delivery skips on the counter, on another worker:
			// a pass that may be wrong, accepted here to see the other
			// warning, which is accepted too (it fails a check by default:
			// TestCleanRunsThatDisagreeFailAPass).
			AcceptWarnings: []result.WarningKind{result.NoStepTaken, result.CleanRunsDisagree},
		})
	})
	require.NotNil(t, res, "errors %q", rec.Errors())
	var w *result.Warning
	for i := range res.Warnings {
		if res.Warnings[i].Kind == result.CleanRunsDisagree {
			w = &res.Warnings[i]
		}
	}
	require.NotNil(t, w, "warnings %+v", res.Warnings)
	require.NotNil(t, w.Disagreement)
	assert.Equal(t, []result.RunCounts{{Name: "marks", Runs: [2]int{1, 0}}}, w.Disagreement.Rows)
	assert.Empty(t, w.Disagreement.Effects)
	assert.Equal(t, [2]int{1, 0}, w.Disagreement.Steps)
	assert.Equal(t, 1, w.Disagreement.StepAt)
	var warned []string
	for _, l := range append(rec.Logs(), rec.Errors()...) {
		if strings.HasPrefix(l, "[twice] warning: ") && strings.Contains(l, "clean reference runs") {
			warned = append(warned, l)
		}
	}
	require.Len(t, warned, 1, "logs %q, errors %q", rec.Logs(), rec.Errors())
	assert.Contains(t, warned[0], `[twice] warning: job "odd-calls": its two clean reference runs disagree beyond volatile columns: table "marks" has 1 row in the first, 0 in the second; the first took 1 step, the second 0, differing from step 1.`)
}

// Clean runs that differ only in values (a time, a random ID) are what
// volatile columns are for: no warning.
func TestCleanRunsDifferingInValuesOnlyAreNoWarning(t *testing.T) {
	var calls atomic.Int64
	job := harness.Job{Name: "counted", Handler: func(ctx context.Context, d *harness.Delivery) error {
		_, err := d.DB.Exec(ctx, `INSERT INTO marks (id, n) VALUES (1, $1) ON CONFLICT (id) DO NOTHING`, calls.Add(1))
		return err
	}}
	res, err := harness.Run(t.Context(), job, harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE marks (id int PRIMARY KEY, n bigint NOT NULL)`)},
		Faults: []faults.Fault{faults.RunTwice()},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	assert.Equal(t, []string{"marks.n"}, res.Volatile)
	for _, w := range res.Warnings {
		assert.NotEqual(t, result.CleanRunsDisagree, w.Kind, "%+v", w)
	}
}

// Clean runs that did different work are a reference that is one
// outcome of several: what differed was compared nowhere, so a pass
// behind them may be wrong. It was a log line only -v showed (issue 38);
// the check now fails, with the line that accepts it.
func TestCleanRunsThatDisagreeFailAPass(t *testing.T) {
	var calls atomic.Int64
	job := harness.Job{Name: "two-ways", Handler: func(ctx context.Context, d *harness.Delivery) error {
		insert := `INSERT INTO marks (id) VALUES (1) ON CONFLICT DO NOTHING`
		if calls.Add(1)%2 == 0 {
			insert = `INSERT INTO marks (id) SELECT 1 ON CONFLICT DO NOTHING`
		}
		_, err := d.DB.Exec(ctx, insert)
		return err
	}}
	cfg := harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE marks (id int PRIMARY KEY)`)},
		Faults: []faults.Fault{faults.RunTwice()},
	}
	rec := recordtb.New(t)
	rec.Run(func(tb testing.TB) { harness.Check(tb, job, cfg) })
	require.Len(t, rec.Errors(), 1, "logs %q", rec.Logs())
	assert.Contains(t, rec.Errors()[0], `its two clean reference runs disagree beyond volatile columns: the first took 1 step, the second 1, differing from step 1`)
	assert.Contains(t, rec.Errors()[0], "This pass may be wrong, so the check fails; if that is expected here, accept it: Config.AcceptWarnings: []result.WarningKind{result.CleanRunsDisagree}")

	cfg.AcceptWarnings = []result.WarningKind{result.CleanRunsDisagree}
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	assert.True(t, res.Idempotent(), "%s", res)
	require.Len(t, res.Warnings, 1)
	assert.Equal(t, result.CleanRunsDisagree, res.Warnings[0].Kind)
}

// Clean runs that made the same statements in another order (a handler
// whose goroutines race) did the same work: nothing is left out of a
// comparison, so they do not disagree, and a check that now fails on
// disagreeing clean runs does not fail on a correct concurrent handler.
func TestCleanRunsInAnotherOrderAgree(t *testing.T) {
	var calls atomic.Int64
	job := harness.Job{Name: "either-order", Handler: func(ctx context.Context, d *harness.Delivery) error {
		inserts := []string{
			`INSERT INTO marks (id) VALUES (1) ON CONFLICT DO NOTHING`,
			`INSERT INTO marks (id) VALUES (2) ON CONFLICT DO NOTHING`,
		}
		if calls.Add(1)%2 == 0 {
			inserts[0], inserts[1] = inserts[1], inserts[0]
		}
		for _, sql := range inserts {
			if _, err := d.DB.Exec(ctx, sql); err != nil {
				return err
			}
		}
		return nil
	}}
	res, err := harness.Run(t.Context(), job, harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE marks (id int PRIMARY KEY)`)},
		Faults: []faults.Fault{faults.RunTwice()},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	assert.True(t, res.Idempotent(), "%s", res)
	assert.Empty(t, res.Warnings)
}
