package twicegue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

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

// setPoints sets the account's points in j.Tx(), which gue commits with
// the job's deletion: idempotent under every fault.
func setPoints(ctx context.Context, j *gue.Job) error {
	var args setArgs
	if err := json.Unmarshal(j.Args, &args); err != nil {
		return err
	}
	_, err := j.Tx().Exec(ctx, `UPDATE accounts SET points = 50 WHERE id = $1`, args.Account)
	return err
}

func setJob() harness.Job {
	return twicegue.Job("set-points", twicegue.Spec[setArgs]{Type: "set-points", Args: setArgs{Account: 7}},
		func(*harness.Delivery) gue.WorkFunc { return setPoints })
}

// The config names only the job's own table: gue's comes with the job.
var accounts = harness.Config{
	Setup:  []harness.Setup{harness.SQL(`CREATE TABLE accounts (id bigint PRIMARY KEY, points int NOT NULL); INSERT INTO accounts VALUES (7, 0)`)},
	Faults: []faults.Fault{faults.RunTwice(), faults.ProducerRetry(), faults.CrashBeforeAck(), faults.CrashAtEveryStep()},
}

// harness.Run, harness.Check and harness.Explore of a gue job need no
// gue-specific setup: the job carries gue_jobs.
func TestJobCarriesGuesSchema(t *testing.T) {
	res, err := harness.Run(t.Context(), setJob(), accounts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	assert.True(t, res.Idempotent(), "%s", res)
	assert.Greater(t, len(res.Scenarios), 3, "crash-mid-job at each of gue's steps, besides the three")
	var gueJobs []string
	for _, tb := range res.Reference.Tables {
		if tb.Name == "gue_jobs" {
			gueJobs = append(gueJobs, fmt.Sprint(tb.Rows))
		}
	}
	assert.Equal(t, []string{"[]"}, gueJobs, "gue_jobs, made by the job's queue, empty once gue deleted the done job")

	harness.Check(t, setJob(), accounts)

	x := harness.Explore(t, setJob(), accounts, harness.ExploreOptions{Checks: 5, Dir: t.TempDir()})
	assert.False(t, x.Failed(), "%+v", x)
	assert.Positive(t, x.Executed)
}
