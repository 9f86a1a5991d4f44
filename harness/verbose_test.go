package harness_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/internal/recordtb"
)

// TestVerboseCheck: under -v a running check logs its progress, and a
// passing one says so in one line.
func TestVerboseCheck(t *testing.T) {
	defer harness.SetVerbose(time.Millisecond)()
	rec := recordtb.New(t)
	progressed := func() bool {
		for _, l := range rec.Logs() {
			if strings.Contains(l, `[twice] job "upsert": `) && strings.Contains(l, " after ") {
				return true
			}
		}
		return false
	}
	job := harness.Job{Name: "upsert", Handler: func(ctx context.Context, d *harness.Delivery) error {
		// Wait for a progress line, so the check is surely long enough to
		// log one: a bound, not a timing assertion.
		for deadline := time.Now().Add(30 * time.Second); !progressed() && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		_, err := d.DB.Exec(ctx, `UPDATE counters SET n = 1`)
		return err
	}}
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.RunTwice(), faults.ProducerRetry()}
	rec.Run(func(tb testing.TB) { harness.Check(tb, job, cfg) })
	require.Empty(t, rec.Errors())
	assert.True(t, progressed(), "no progress line in %q", rec.Logs())
	var ok []string
	for _, l := range rec.Logs() {
		if strings.HasPrefix(l, "[twice] ok: ") {
			ok = append(ok, l)
		}
	}
	require.Len(t, ok, 1, "logs %q", rec.Logs())
	assert.Regexp(t, `^\[twice\] ok: job "upsert": 2 scenarios, none differs from one clean run \(\S+\)$`, ok[0])
}

// TestVerboseExplore: under -v a running exploration logs its progress.
func TestVerboseExplore(t *testing.T) {
	defer harness.SetVerbose(time.Millisecond)()
	rec := recordtb.New(t)
	progressed := func() bool {
		for _, l := range rec.Logs() {
			if strings.HasPrefix(l, `[twice] job "upsert": still checking after `) {
				return true
			}
		}
		return false
	}
	job := harness.Job{Name: "upsert", Handler: func(ctx context.Context, d *harness.Delivery) error {
		for deadline := time.Now().Add(30 * time.Second); !progressed() && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		_, err := d.DB.Exec(ctx, `UPDATE counters SET n = 1`)
		return err
	}}
	rec.Run(func(tb testing.TB) {
		harness.Explore(tb, job, counterConfig(), harness.ExploreOptions{Dir: t.TempDir(), Checks: 3})
	})
	require.Empty(t, rec.Errors())
	assert.True(t, progressed(), "no progress line in %q", rec.Logs())
}

// TestVerboseSaysWhatTheCheckDoes: before its scenarios are counted, a
// slow check's progress line says what it is on (its setup, a clean
// reference run, an exploration), not only that it is still checking
// (issue 37).
func TestVerboseSaysWhatTheCheckDoes(t *testing.T) {
	defer harness.SetVerbose(time.Millisecond)()
	rec := recordtb.New(t)
	const want = `[twice] job "upsert": still checking after `
	said := func(what string) bool {
		for _, l := range rec.Logs() {
			if strings.HasPrefix(l, want) && strings.Contains(l, what) {
				return true
			}
		}
		return false
	}
	var calls atomic.Int32
	job := harness.Job{Name: "upsert", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if calls.Add(1) == 1 {
			// The first clean reference run waits for its progress line:
			// a bound, not a timing assertion.
			for deadline := time.Now().Add(30 * time.Second); !said(": on clean reference run 1 of 2") && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		}
		_, err := d.DB.Exec(ctx, `UPDATE counters SET n = 1`)
		return err
	}}
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.RunTwice()}
	rec.Run(func(tb testing.TB) { harness.Check(tb, job, cfg) })
	require.Empty(t, rec.Errors())
	assert.True(t, said(": on clean reference run 1 of 2"), "no progress line naming the clean run in %q", rec.Logs())
}

// TestVerboseStepTimes: under -v a passing check says where, by
// Config.StepTimes, visibility-timeout paused the first delivery, or
// that the job returned before the queue gave up on it.
func TestVerboseStepTimes(t *testing.T) {
	defer harness.SetVerbose(time.Hour)()
	job := harness.Job{Name: "set", Handler: func(ctx context.Context, d *harness.Delivery) error {
		_, err := d.DB.Exec(ctx, `UPDATE counters SET n = 1`)
		return err
	}}
	for _, c := range []struct {
		takes time.Duration
		want  string
	}{
		{10 * time.Millisecond, `[twice] job "set": visibility-timeout: no scenario: by Config.StepTimes the job's steps take 10ms in all, so it has returned before the queue hands it out again at 30s`},
		{time.Minute, `[twice] job "set": visibility-timeout: by Config.StepTimes the first delivery is in step 1 (UPDATE counters SET n = 1), which started at 0s, when the queue hands the job out again at 30s: it is paused there only, before and after that step`},
	} {
		rec := recordtb.New(t)
		cfg := counterConfig()
		cfg.Faults = []faults.Fault{faults.RunTwice(), faults.VisibilityTimeout()}
		cfg.StepTimes = []faults.StepTime{{Match: `^UPDATE counters`, Takes: c.takes}}
		var res *harness.Result
		rec.Run(func(tb testing.TB) { res = harness.Check(tb, job, cfg) })
		require.Empty(t, rec.Errors())
		assert.Contains(t, rec.Logs(), c.want)
		if c.takes < time.Second {
			assert.Len(t, res.Scenarios, 1, "run-twice only")
		} else {
			assert.Len(t, res.Scenarios, 2)
		}
	}

	// Without visibility-timeout among the faults, step times place no
	// pause: no line, no Overlap.
	rec := recordtb.New(t)
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.RunTwice()}
	cfg.StepTimes = []faults.StepTime{{Match: `^UPDATE counters`, Takes: time.Minute}}
	var res *harness.Result
	rec.Run(func(tb testing.TB) { res = harness.Check(tb, job, cfg) })
	require.Empty(t, rec.Errors())
	assert.NotContains(t, rec.Logs(), "visibility-timeout")
	assert.Nil(t, res.Overlap)

	// The fault alone, with no overlap, would check nothing: an error
	// that says why.
	cfg = counterConfig()
	cfg.Faults = []faults.Fault{faults.VisibilityTimeout()}
	cfg.StepTimes = []faults.StepTime{{Match: `^UPDATE counters`, Takes: time.Millisecond}}
	_, err := harness.Run(t.Context(), job, cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `Config.Faults gave no scenario for its clean run of 1 steps (visibility-timeout has none where, by Config.StepTimes, the job's steps take 1ms in all, under the queue's 30s), so nothing would be checked`)
}
