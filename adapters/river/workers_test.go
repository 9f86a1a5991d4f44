package twiceriver_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twiceriver "github.com/runtwice/twice/adapters/river"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/recordtb"
)

type bonusArgs struct {
	Account int64 `json:"account"`
}

func (bonusArgs) Kind() string { return "twice_bonus_points" }

// bonusWorker adds to the account's points on every run: not idempotent.
type bonusWorker struct {
	river.WorkerDefaults[bonusArgs]
	pool *pgxpool.Pool
}

func (w *bonusWorker) Work(ctx context.Context, job *river.Job[bonusArgs]) error {
	_, err := w.pool.Exec(ctx, `UPDATE accounts SET points = points + 10 WHERE id = $1`, job.Args.Account)
	return err
}

type resetArgs struct {
	Account int64 `json:"account"`
}

func (resetArgs) Kind() string { return "twice_reset_points" }

// KindAliases: a renamed kind; the bundle holds both names for one worker.
func (resetArgs) KindAliases() []string { return []string{"twice_zero_points"} }

type resetWorker struct {
	river.WorkerDefaults[resetArgs]
	pool *pgxpool.Pool
}

func (w *resetWorker) Work(ctx context.Context, job *river.Job[resetArgs]) error {
	_, err := w.pool.Exec(ctx, `UPDATE accounts SET points = 0 WHERE id = $1`, job.Args.Account)
	return err
}

// service is what production registers: three workers, built here with
// no pool, since only their kinds are read.
func service() *river.Workers {
	w := river.NewWorkers()
	river.AddWorker(w, &setWorker{})
	river.AddWorker(w, &bonusWorker{})
	river.AddWorker(w, &resetWorker{})
	return w
}

func bonusJob() harness.Job {
	return twiceriver.Job("bonus-points", bonusArgs{Account: 7},
		func(d *harness.Delivery) river.Worker[bonusArgs] { return &bonusWorker{pool: d.DB} })
}

func resetJob() harness.Job {
	return twiceriver.Job("reset-points", resetArgs{Account: 7},
		func(d *harness.Delivery) river.Worker[resetArgs] { return &resetWorker{pool: d.DB} })
}

// Kinds lists what a bundle registers, each worker once (an alias is not
// a worker of its own).
func TestKindsOfABundle(t *testing.T) {
	kinds, err := twiceriver.Kinds(service())
	require.NoError(t, err)
	assert.Equal(t, []string{"twice_bonus_points", "twice_reset_points", "twice_set_points"}, kinds)
	_, err = twiceriver.Kinds(nil)
	assert.ErrorContains(t, err, "the workers bundle is nil")
}

// A service with three registered workers and samples for two: the check
// runs the two and fails naming the third. With all three it runs them,
// and each passes or is found as it deserves.
func TestCheckWorkersNamesTheWorkerWithoutASample(t *testing.T) {
	bonus := harness.Sample{Job: bonusJob(), ExpectFinding: "adds 10 points on every run", ExpectPattern: result.IncrementWithoutRecord}
	rec := recordtb.New(t)
	var results []*harness.Result
	rec.Run(func(tb testing.TB) {
		results = twiceriver.CheckWorkers(tb, service(), accounts, harness.Sample{Job: setJob()}, bonus)
	})
	errs := strings.Join(rec.Errors(), "\n")
	assert.Contains(t, errs, "[twice] the River workers bundle registers 1 kind that no sample checks: twice_reset_points;")
	require.Len(t, results, 2)
	assert.Equal(t, result.OutcomeIdempotent, results[0].Outcome)
	assert.Equal(t, result.OutcomeExpectedFinding, results[1].Outcome)

	results = twiceriver.CheckWorkers(t, service(), accounts, harness.Sample{Job: setJob()}, bonus, harness.Sample{Job: resetJob()})
	require.Len(t, results, 3)
	assert.Equal(t, result.OutcomeIdempotent, results[2].Outcome)

	// A sample of a kind the bundle does not hold would pass a check of
	// a worker production never runs.
	rec = recordtb.New(t)
	rec.Run(func(tb testing.TB) {
		w := river.NewWorkers()
		river.AddWorker(w, &setWorker{})
		twiceriver.CheckWorkers(tb, w, accounts, harness.Sample{Job: setJob()}, harness.Sample{Job: resetJob()})
	})
	assert.Contains(t, strings.Join(rec.Errors(), "\n"), "[twice] samples check 1 kind the River workers bundle does not hold: twice_reset_points;")
}
