package twiceasynq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twiceasynq "github.com/runtwice/twice/adapters/asynq"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

type setArgs struct {
	Account int64 `json:"account"`
}

// setPoints sets the account's points: idempotent under every fault.
func setPoints(pool *pgxpool.Pool) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		var args setArgs
		if err := json.Unmarshal(task.Payload(), &args); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, `UPDATE accounts SET points = 50 WHERE id = $1`, args.Account)
		return err
	})
}

func setJob(t *testing.T) harness.Job {
	payload, err := json.Marshal(setArgs{Account: 7})
	require.NoError(t, err)
	return twiceasynq.Job("set-points", asynq.NewTask("points:set", payload),
		func(d *harness.Delivery) asynq.Handler { return setPoints(d.DB) })
}

// The config names only the job's own table: the adapter's come with the
// job.
var accounts = harness.Config{
	Setup:  []harness.Setup{harness.SQL(`CREATE TABLE accounts (id bigint PRIMARY KEY, points int NOT NULL); INSERT INTO accounts VALUES (7, 0)`)},
	Faults: []faults.Fault{faults.RunTwice(), faults.ProducerRetry(), faults.CrashBeforeAck(), faults.CrashAtEveryStep()},
}

// harness.Run, harness.Check and harness.Explore of an asynq job need no
// asynq-specific setup: the job carries the adapter's tables.
func TestJobCarriesItsTables(t *testing.T) {
	res, err := harness.Run(t.Context(), setJob(t), accounts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	assert.True(t, res.Idempotent(), "%s", res)
	assert.Len(t, res.Scenarios, 4, "run-twice, producer-retry, crash-before-ack, crash-mid-job at its one step")
	var names []string
	for _, tb := range res.Reference.Tables {
		names = append(names, tb.Name)
	}
	assert.Equal(t, []string{"accounts"}, names, "the adapter's tables are made by the job's queue and left out of the comparison")
	for _, s := range res.Scenarios {
		for _, d := range s.Deliveries {
			if d.NotDelivered == "" && d.Settled != "" {
				assert.Equal(t, "completed", d.Settled, fmt.Sprint(s.Schedule))
			}
		}
	}

	harness.Check(t, setJob(t), accounts)

	x := harness.Explore(t, setJob(t), accounts, harness.ExploreOptions{Checks: 5, Dir: t.TempDir()})
	assert.False(t, x.Failed(), "%+v", x)
	assert.Positive(t, x.Executed)
}
