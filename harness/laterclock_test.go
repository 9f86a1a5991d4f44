package harness_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// A scenario whose job starts after the clock moved (a crash before any
// write, then the redelivery 30s or a redrive 72h later) is compared with
// a clean run at that later clock, but only when the job could tell the
// two clocks apart. Two jobs that differ only in reading Delivery.Now
// make the same scenarios; the one that reads it also makes the clean
// runs at the later clocks, each one more call of its handler.
func TestCleanRunAtALaterClockOnlyForAJobThatReadsTheClock(t *testing.T) {
	cfg := harness.Config{
		Setup: []harness.Setup{harness.SQL(accountsSchema)},
		Faults: []faults.Fault{
			faults.CrashAt(1),
			faults.Redrive(faults.DefaultRedriveAfter),
		},
	}
	run := func(readsClock bool) (calls int64, res *harness.Result) {
		var n atomic.Int64
		job := harness.Job{Name: "soft-delete", Handler: func(ctx context.Context, d *harness.Delivery) error {
			n.Add(1)
			if readsClock {
				_ = d.Now()
			}
			_, err := d.DB.Exec(ctx, `UPDATE accounts SET deleted_at = '2026-01-01' WHERE id = 7`)
			return err
		}}
		res, err := harness.Run(t.Context(), job, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { res.DropDatabases(context.Background()) })
		for _, sc := range res.Scenarios {
			assert.Equal(t, result.Idempotent, sc.Verdict, "%s: %v", sc.Schedule, sc.Problems)
		}
		return n.Load(), res
	}
	blind, blindRes := run(false)
	reads, readsRes := run(true)
	require.Equal(t, len(blindRes.Scenarios), len(readsRes.Scenarios), "both jobs make the same scenarios")
	// The crash before the only write moves the job's start by the
	// visibility timeout, and the redrive after such a crash by 72h:
	// two later clocks, one clean run each.
	assert.Equal(t, blind+2, reads, "handler calls: the clock-reading job adds one clean run per later clock")
}
