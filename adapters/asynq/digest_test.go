package twiceasynq_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twiceasynq "github.com/runtwice/twice/adapters/asynq"
	twiceassert "github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
)

// digest mails a weekly digest and records nothing: the task's ID and
// asynq's Retention of the completed task are its record.
func digest(opts ...asynq.Option) harness.Job {
	task := asynq.NewTask("digest:weekly", []byte(`{"user":"alice","week":"2026-W49"}`),
		append([]asynq.Option{asynq.TaskID("digest-alice-2026-W49")}, opts...)...)
	return twiceasynq.Job("weekly-digest", task, func(d *harness.Delivery) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			return d.Mail().Send(ctx, effects.Email{To: "alice@example.com", Subject: "Your week"})
		})
	})
}

var digestConfig = harness.Config{
	Setup:          []harness.Setup{harness.SQL(`CREATE TABLE users (id text PRIMARY KEY)`)},
	EffectPolicies: map[string]twiceassert.Policy{effects.KindEmail: twiceassert.AckRecorded},
}

// The digest is at-least-once with asynq's ack as its record
// (assert.AckRecorded): the second mail after a crash before the ack, a
// lost ack or a redrive is the window that leaves, and the task ID
// refuses a producer's copy while the completed task is retained, so the
// check passes. A copy that comes after the 7 days of Retention is a new
// task and mails again: found, from the job's second copy, as the dedup
// window passed.
func TestDigestRecordedByTheAck(t *testing.T) {
	job := digest(asynq.Retention(7 * 24 * time.Hour))
	assert.Equal(t, 7*24*time.Hour, job.Queue.Rules().Dedup, "the task ID is held for the retention")

	cfg := digestConfig
	cfg.Faults = faults.DefaultWithout(faults.NameProducerRetryAfterDedup)
	harness.Check(t, job, cfg)

	cfg.Faults = []faults.Fault{faults.ProducerRetryAfterDedup()}
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	require.Len(t, res.Scenarios, 1)
	s := res.Scenarios[0]
	require.Equal(t, result.NotIdempotent, s.Verdict, "%s", res)
	require.NotNil(t, s.EffectDiff)
	assert.Equal(t, 1, s.EffectDiff.Extra)
	require.NotEmpty(t, s.Culprits)
	assert.Equal(t, "j2a1w2", s.Culprits[0].Delivery.Label(), "the copy after the retention mailed again")
	assert.Equal(t, result.DedupWindowPassed, s.Culprits[0].Pattern, "the task ID's retention had ended")

	// Without the ack as its record, at-least-once finds the second mail
	// after a crash before the ack: the job could have recorded it.
	cfg.EffectPolicies = map[string]twiceassert.Policy{effects.KindEmail: twiceassert.AtLeastOnce}
	cfg.Faults = []faults.Fault{faults.CrashBeforeAck()}
	res, err = harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	assert.False(t, res.Idempotent(), "%s", res)
}
