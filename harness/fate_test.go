package harness_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// The executor records each step's fate as it happens, one per step the
// delivery was granted, in order: Steps[k-1] is the step Delivery.At
// names, whatever the fault did to it.
func TestStepFates(t *testing.T) {
	lockThenSet := func(ctx context.Context, d *harness.Delivery) error {
		return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT 1 FROM items WHERE id = 1 FOR UPDATE`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE items SET note = 'set' WHERE id = 1`)
			return err
		})
	}
	sleepOnRedelivery := func(ctx context.Context, d *harness.Delivery) error {
		if d.Attempt == 1 {
			return nil
		}
		_, err := d.DB.Exec(ctx, `SELECT pg_sleep(600)`)
		return err
	}
	insertTwice := func(ctx context.Context, d *harness.Delivery) error {
		for _, what := range []string{"a", "b"} {
			if _, err := d.DB.Exec(ctx, `INSERT INTO log VALUES ($1, $2)`, d.Attempt, what); err != nil {
				return err
			}
		}
		return nil
	}
	for _, tc := range []struct {
		name     string
		handler  harness.Handler
		schedule string
		tweak    func(*harness.Config)
		delivery int // index into Scenario.Deliveries
		want     []result.Fate
		faulted  result.Fate // Faulted()'s fate; empty when no step was hit
	}{
		{name: "crash before a step", handler: logSteps, schedule: "j1a1w1!crash:3 > +30s j1a2w2",
			want: []result.Fate{result.Ran, result.Ran, result.CrashedBefore}, faulted: result.CrashedBefore},
		{name: "crash before the ack", handler: logSteps, schedule: "j1a1w1!crash > +30s j1a2w2",
			want: []result.Fate{result.Ran, result.Ran, result.Ran, result.Ran}},
		{name: "reply lost", handler: logSteps, schedule: "j1a1w1!ambiguous:4 > +30s j1a2w2",
			want: []result.Fate{result.Ran, result.Ran, result.Ran, result.ReplyLost}, faulted: result.ReplyLost},
		{name: "crash right after an effect", handler: payThenLog(&sawCalls{}, false), schedule: "j1a1w1!crashafter:1 > +30s j1a2w2",
			want: []result.Fate{result.CrashedAfter}, faulted: result.CrashedAfter},
		{name: "an effect's answer lost", handler: payThenLog(&sawCalls{}, true), schedule: "j1a1w1!lostreply:1",
			want: []result.Fate{result.TimedOut, result.Ran, result.Ran}, faulted: result.TimedOut},
		{name: "an effect refused", handler: payThenLog(&sawCalls{}, false), schedule: "j1a1w1!failed:1",
			want: []result.Fate{result.Refused}, faulted: result.Refused},
		{name: "commit held", handler: insertTwice, schedule: "j1a1w1 > j2a1w2@1:0 order 1,2,2,1~",
			want: []result.Fate{result.Ran, result.CommitHeld}},
		{name: "waited on a lock", handler: lockThenSet, schedule: "j1a1w1 > j1a2w2@1:0 order 1,1,2,2,1,1,2,2", delivery: 1,
			want: []result.Fate{result.Ran, result.WaitedOnLock, result.Ran, result.Ran}},
		{name: "unfinished when the handler hung", handler: sleepOnRedelivery, schedule: "j1a1w1 > j1a2w2", delivery: 1,
			tweak: func(c *harness.Config) { c.DeliveryTimeout = 2 * time.Second },
			want:  []result.Fate{result.Unfinished}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tweaks []func(*harness.Config)
			if tc.tweak != nil {
				tweaks = append(tweaks, tc.tweak)
			}
			sc := replay(t, harness.Job{Name: "fates", Handler: tc.handler}, tc.schedule, tweaks...).Scenarios[0]
			require.Greater(t, len(sc.Deliveries), tc.delivery)
			d := sc.Deliveries[tc.delivery]
			assert.Equal(t, tc.want, fates(d), "steps %+v", d.Steps)
			taken := 0
			for _, o := range sc.Order {
				if o == tc.delivery+1 {
					taken++
				}
			}
			assert.Equal(t, taken, len(d.Steps), "the delivery's entries of Order are its steps")
			if tc.faulted == "" {
				assert.Nil(t, d.Faulted())
				return
			}
			require.NotNil(t, d.Faulted())
			assert.Equal(t, tc.faulted, d.Faulted().Fate)
			assert.Equal(t, d.Steps[d.Delivery.At-1], *d.Faulted(), "Delivery.At names the faulted step")
		})
	}
}
