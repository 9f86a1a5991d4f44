package twicegue_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vgarvardt/gue/v5"

	twicegue "github.com/runtwice/twice/adapters/gue"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

type setArgs struct {
	Account int64 `json:"account"`
}

// The config names only the job's own table: gue's comes with the job.
var accounts = harness.Config{
	Setup:  []harness.Setup{harness.SQL(`CREATE TABLE accounts (id bigint PRIMARY KEY, points int NOT NULL); INSERT INTO accounts VALUES (7, 0)`)},
	Faults: []faults.Fault{faults.RunTwice(), faults.ProducerRetry(), faults.CrashBeforeAck(), faults.CrashAtEveryStep()},
}

// addPoints adds to the account outside j.Tx(), on the delivery's own
// pool: a crash after it and before gue's COMMIT adds again.
func addPoints(d *harness.Delivery) gue.WorkFunc {
	return func(ctx context.Context, j *gue.Job) error {
		var args setArgs
		if err := json.Unmarshal(j.Args, &args); err != nil {
			return err
		}
		_, err := d.DB.Exec(ctx, `UPDATE accounts SET points = points + 50 WHERE id = $1`, args.Account)
		return err
	}
}

// A job its producer scheduled for later (RunAt, here Spec.RunAfter) runs
// when it is due on the harness clock: gue's due-job test compares run_at
// with the worker's time.Now, and the adapter makes both the harness
// clock's (Fetch answers run_at as queue.Fetched.DueAt). The WorkFunc's
// steps are the plan, so a crash between its write and gue's COMMIT is
// found; before, the first delivery was an empty poll of no steps.
func TestRunAfterRunsWhenDue(t *testing.T) {
	var mu sync.Mutex // scenarios run in parallel
	var seen []time.Time
	job := twicegue.Job("add-points-later", twicegue.Spec[setArgs]{Type: "add-points", Args: setArgs{Account: 7}, RunAfter: 10 * time.Second},
		func(d *harness.Delivery) gue.WorkFunc {
			mu.Lock()
			seen = append(seen, d.Now())
			mu.Unlock()
			return addPoints(d)
		})
	cfg := accounts
	cfg.Faults = []faults.Fault{faults.CrashAtEveryStep()}
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	assert.NotEmpty(t, res.Steps, "the plan is the delivery that ran the WorkFunc")
	mu.Lock()
	require.NotEmpty(t, seen)
	first := seen[0]
	mu.Unlock()
	assert.Equal(t, time.Date(2026, 1, 1, 9, 0, 10, 0, time.UTC), first.UTC(), "the clean run's WorkFunc runs at run_at")
	assert.False(t, res.Idempotent(), "a write outside j.Tx() is made again after a crash: %s", res)
	for _, s := range res.Scenarios {
		require.NotEmpty(t, s.Deliveries)
		assert.Equal(t, 10*time.Second, s.Deliveries[0].Waited, "%s: the first delivery waited for run_at", s.Schedule)
	}
}
