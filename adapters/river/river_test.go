package twiceriver_test

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

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
