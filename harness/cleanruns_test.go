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
			// warning.
			AcceptWarnings: []result.WarningKind{result.NoStepTaken},
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
