package twiceriver_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twiceriver "github.com/runtwice/twice/adapters/river"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

type setArgs struct {
	Account int64 `json:"account"`
}

func (setArgs) Kind() string { return "twice_set_points" }

// setWorker sets the account's points: idempotent under every fault.
type setWorker struct {
	river.WorkerDefaults[setArgs]
	pool *pgxpool.Pool
}

func (w *setWorker) Work(ctx context.Context, job *river.Job[setArgs]) error {
	_, err := w.pool.Exec(ctx, `UPDATE accounts SET points = 50 WHERE id = $1`, job.Args.Account)
	return err
}

func setJob() harness.Job {
	return twiceriver.Job("set-points", setArgs{Account: 7},
		func(d *harness.Delivery) river.Worker[setArgs] { return &setWorker{pool: d.DB} })
}

// The config names only the job's own table: River's schema comes with
// the job.
var accounts = harness.Config{
	Setup:  []harness.Setup{harness.SQL(`CREATE TABLE accounts (id bigint PRIMARY KEY, points int NOT NULL); INSERT INTO accounts VALUES (7, 0)`)},
	Faults: []faults.Fault{faults.RunTwice(), faults.ProducerRetry(), faults.CrashBeforeAck(), faults.CrashAtEveryStep()},
}

// harness.Run, harness.Check and harness.Explore of a River job need no
// River-specific setup: the job carries River's migrations.
func TestJobCarriesRiversSchema(t *testing.T) {
	res, err := harness.Run(t.Context(), setJob(), accounts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	assert.True(t, res.Idempotent(), "%s", res)
	assert.Len(t, res.Scenarios, 4, "run-twice, producer-retry, crash-before-ack, crash-mid-job at its one step")
	for _, s := range res.Scenarios {
		for _, d := range s.Deliveries {
			if d.NotDelivered == "" && d.Settled != "" {
				assert.Contains(t, d.Settled, "completed", "%s: River's completer ran", s.Schedule)
			}
		}
	}

	harness.Check(t, setJob(), accounts)

	x := harness.Explore(t, setJob(), explorable(accounts), harness.ExploreOptions{Checks: 5, Dir: t.TempDir()})
	assert.False(t, x.Failed(), "%+v", x)
	assert.Positive(t, x.Executed)
}

// explorable is cfg without its Faults: exploration draws its own
// schedules and refuses Config.Faults.
func explorable(cfg harness.Config) harness.Config {
	cfg.Faults = nil
	return cfg
}
