package harness_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/internal/blame"
)

// oneStepJob takes one statement, so any fault or start past step 1
// means nothing for it.
var oneStepJob = harness.Job{Name: "one-step", Handler: func(ctx context.Context, d *harness.Delivery) error {
	_, err := d.DB.Exec(ctx, `UPDATE users SET is_email_verified = true WHERE id = 1`)
	return err
}}

// Input that means nothing is refused with what is accepted, before the
// check runs, instead of running as something else (issue 27).
func TestMeaninglessInputIsRefused(t *testing.T) {
	tests := []struct {
		name string
		cfg  harness.Config
		want string
	}{{
		name: "CrashAt(0)",
		cfg:  harness.Config{Faults: []faults.Fault{faults.CrashAt(0)}},
		want: "faults.CrashAt(0): steps count from 1; for a crash after the last step use faults.CrashBeforeAck()",
	}, {
		name: "CrashAt(-1)",
		cfg:  harness.Config{Faults: []faults.Fault{faults.RunTwice(), faults.CrashAt(-1)}},
		want: "faults.CrashAt(-1): steps count from 1",
	}, {
		name: "AmbiguousCommitAt(0)",
		cfg:  harness.Config{Faults: []faults.Fault{faults.AmbiguousCommitAt(0)}},
		want: "faults.AmbiguousCommitAt(0): steps count from 1",
	}, {
		name: "a start past the job's steps",
		cfg:  replayOf(t, "j1a1w1 > j1a2w2@1:5"),
		want: `[twice] schedule "j1a1w1 > j1a2w2@1:5": delivery 2 (j1a2w2@1:5) starts once delivery 1 has done 5 steps, but job "one-step" takes 1 step on a clean run, so the deliveries would never overlap; use @1:0 to @1:2 (a delivery may take up to 2 times the clean run's steps)`,
	}, {
		name: "an order longer than the steps",
		cfg:  replayOf(t, "j1a1w1 > j1a2w2@1:0 order 1,2,1,2,1,2,1"),
		want: `[twice] schedule "j1a1w1 > j1a2w2@1:0 order 1,2,1,2,1,2,1": the order has 7 places, but its 2 deliveries take 2 steps in all on a clean run of job "one-step" (1 step each); give at most 4 (a delivery may take up to 2 times the clean run's steps)`,
	}, {
		name: "an order for deliveries that never overlap",
		cfg:  replayOf(t, "j1a1w1 > +30s j1a2w2 order 1,2"),
		want: `[twice] schedule "j1a1w1 > +30s j1a2w2 order 1,2": an order interleaves deliveries that overlap, but every delivery here starts after the previous one ended`,
	}, {
		name: "a crash past the job's steps",
		cfg:  replayOf(t, "j1a1w1!crash:2 > +30s j1a2w2"),
		want: `j1a1w1!crash:2 acts on step 2, but job "one-step" takes 1 step on a clean run, so the fault would never happen`,
	}, {
		name: "negative durations",
		cfg:  harness.Config{DeliveryTimeout: -time.Second, SetupTimeout: -time.Minute, ProducerRetriesWithin: -time.Second},
		want: "[twice] Config.SetupTimeout is -1m0s; want a positive duration, or zero for 2 minutes; Config.DeliveryTimeout is -1s; want a positive duration, or zero for 30s; Config.ProducerRetriesWithin is -1s; want a positive duration, or zero for a producer that may retry at any time",
	}, {
		name: "a step time that times nothing",
		cfg:  harness.Config{StepTimes: []faults.StepTime{{Effect: "email", Takes: 2 * time.Second}, {Match: "(", Takes: time.Second}}},
		want: "[twice] Config.StepTimes[1]: faults.StepTime{Effect: \"\", Match: \"(\", Takes: 1s}: field Match \"(\": error parsing regexp: missing closing )",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Setup = []harness.Setup{harness.SQL(usersSchema)}
			res, err := harness.Run(t.Context(), oneStepJob, tt.cfg)
			if res != nil {
				t.Cleanup(func() { res.DropDatabases(context.Background()) })
			}
			require.Error(t, err)
			assert.Contains(t, blame.Message(err), tt.want)
		})
	}
	// The same job and schedules within its steps run.
	for _, text := range []string{"j1a1w1 > j1a2w2@1:1", "j1a1w1 > j1a2w2@1:0 order 1,2", "j1a1w1 > j1a2w2@1:2 order 1,2,2,1"} {
		cfg := replayOf(t, text)
		cfg.Setup = []harness.Setup{harness.SQL(usersSchema)}
		res, err := harness.Run(t.Context(), oneStepJob, cfg)
		require.NoError(t, err, text)
		t.Cleanup(func() { res.DropDatabases(context.Background()) })
	}
}

func replayOf(t *testing.T, text string) harness.Config {
	t.Helper()
	s, err := faults.Parse(text)
	require.NoError(t, err)
	return harness.Config{Faults: []faults.Fault{faults.Replay(s)}}
}

// TWICE_KEEP that is no boolean is refused, not taken as "keep".
func TestKeepSettingIsRefused(t *testing.T) {
	t.Setenv(harness.KeepEnv, "nope")
	_, err := harness.Run(t.Context(), oneStepJob, harness.Config{Setup: []harness.Setup{harness.SQL(usersSchema)}, Faults: []faults.Fault{faults.RunTwice()}})
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(blame.Message(err), `[twice] -twice.keep or TWICE_KEEP is "nope"; want true (keep a failed check's databases, the default) or false (drop them)`), blame.Message(err))

	t.Setenv(harness.KeepEnv, "false")
	res, err := harness.Run(t.Context(), oneStepJob, harness.Config{Setup: []harness.Setup{harness.SQL(usersSchema)}, Faults: []faults.Fault{faults.RunTwice()}})
	require.NoError(t, err)
	res.DropDatabases(context.Background())
}

// A fault that means nothing is refused before any server or template
// work: the setup here would fail if it ran, and the error is the
// fault's, not the setup's.
func TestFaultsAreCheckedBeforeTheTemplate(t *testing.T) {
	cfg := harness.Config{
		Setup:  []harness.Setup{harness.SQL(`THIS IS NOT SQL`)},
		Faults: []faults.Fault{faults.CrashAt(0)},
	}
	_, err := harness.Run(t.Context(), oneStepJob, cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "faults.CrashAt(0): steps count from 1")
	assert.NotContains(t, err.Error(), "THIS IS NOT SQL")
}

// Explore draws its own schedules: Config.Faults given to it would be
// checked and never run, so it is refused with where to say instead.
func TestExploreRefusesConfigFaults(t *testing.T) {
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(usersSchema)}, Faults: []faults.Fault{faults.CrashBeforeAck()}}
	_, err := harness.ExploreRun(t.Context(), oneStepJob, cfg, harness.ExploreOptions{Checks: 1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `job "one-step": Explore and ExploreRun draw their own schedules and do not run Config.Faults (1 given)`)
	assert.Contains(t, err.Error(), "ExploreOptions.Limits")

	cfg.Faults = nil
	cfg.StepTimes = []faults.StepTime{{Effect: "email", Takes: time.Second}}
	_, err = harness.ExploreRun(t.Context(), oneStepJob, cfg, harness.ExploreOptions{Checks: 1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `job "one-step": Explore and ExploreRun draw overlaps at any step and do not read Config.StepTimes (1 given)`)
}
