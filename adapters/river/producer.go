package twiceriver

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/runtwice/twice/harness/queue"
)

// Producing is what the producer's own code is given for one insert of
// the job (Producer): the original's, or one of the producer's copies.
type Producing struct {
	// Client is a River client on the scenario's database whose clock
	// is the harness's at this insert, with the workers bundle of
	// Workers if it is given: call Insert, InsertTx or InsertMany on it
	// as production calls them on its client, with its own InsertOpts.
	// It works no jobs.
	Client *river.Client[pgx.Tx]
	// Tx is a transaction on the scenario's database for InsertTx: it
	// commits when the producer's code returns nil, and rolls back when
	// it returns an error.
	Tx pgx.Tx
	// DB is a pool on the scenario's database, for a producer that
	// writes and inserts in a transaction of its own (DB.Begin, then
	// Client.InsertTx). It connects only if used, and is closed when
	// the producer's code returns. What the producer writes is compared
	// as the job's writes are, but its statements are not steps: no
	// fault hits them.
	DB *pgxpool.Pool
	// Now is the harness clock at this insert: give it to the producer
	// where production reads time.Now(), so arguments and options it
	// builds at enqueue time (a RequestedAt, ScheduledAt) are those of
	// the copy's time.
	Now func() time.Time
	// Copy is 1 for the original insert, 2 and up for the producer's
	// copies (faults.ProducerRetry, faults.LateProducerRetry).
	Copy int
}

// Producer runs the producer's own code for every insert of the job,
// instead of inserting Job's args with InsertOpts: the original's, and
// each producer copy's at the copy's time on the harness clock (the
// late-producer-retry copy comes harness.Config.ProducerTimeout, 5s,
// after the original). Pass production's function unchanged, wired to
// p as newWorker wires the worker to the delivery:
//
//	twiceriver.Producer(func(ctx context.Context, p twiceriver.Producing) error {
//		return bonus.Grant(ctx, p.Client, p.Tx, p.Now, 7)
//	})
//
// The code must insert the job, one job of the job's args' kind, in one
// call (other kinds it inserts are child jobs, compared as the worker's
// are). A copy whose code inserts no such job was refused by the
// producer itself (it found its earlier insert), and one River skips as
// a duplicate (UniqueOpts) was refused by River: neither is delivered.
// Job's args then serve only to read the worker's Timeout and kind.
func Producer(produce func(ctx context.Context, p Producing) error) Option {
	return func(o *options) { o.produce = produce }
}

// insertsSeen is River insert middleware that keeps what every insert
// through its client returned.
type insertsSeen struct {
	river.JobInsertMiddlewareDefaults
	mu   sync.Mutex
	jobs []*rivertype.JobInsertResult
}

func (s *insertsSeen) InsertMany(ctx context.Context, params []*rivertype.JobInsertParams, doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	res, err := doInner(ctx)
	if err == nil {
		s.mu.Lock()
		s.jobs = append(s.jobs, res...)
		s.mu.Unlock()
	}
	return res, err
}

// produce runs the producer's code for the insert op asks for and
// answers with the job of the job's kind it inserted.
func (q *riverQueue[T]) produce(ctx context.Context, op queue.Op) (queue.Enqueued, error) {
	which := fmt.Sprintf("twiceriver: job %q: the producer's code (twiceriver.Producer), insert %d", q.name, op.Job)
	pool, err := queue.Pool(ctx, op.Conn, 4)
	if err != nil {
		return queue.Enqueued{}, fmt.Errorf("%s: a pool on the scenario's database: %w", which, err)
	}
	defer pool.Close()
	now := op.Now
	clockNow := func() time.Time { return now }
	seen := &insertsSeen{}
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: quiet, Test: river.TestConfig{Time: clock(clockNow)},
		Workers: q.opts.workers, Middleware: []rivertype.Middleware{seen}, Schema: q.opts.schema})
	if err != nil {
		return queue.Enqueued{}, fmt.Errorf("%s: a River client: %w", which, err)
	}
	tx, err := op.Conn.Begin(ctx)
	if err != nil {
		return queue.Enqueued{}, fmt.Errorf("%s: %w", which, err)
	}
	if err := queue.RunProducer(ctx, q.opts.produce, Producing{Client: c, Tx: tx, DB: pool, Now: clockNow, Copy: op.Job}); err != nil {
		_ = tx.Rollback(ctx)
		return queue.Enqueued{}, fmt.Errorf("%s returned: %w", which, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return queue.Enqueued{}, fmt.Errorf("%s: committing its transaction (Producing.Tx): %w", which, err)
	}
	r, dup, err := queue.FollowOne(queue.ProducerCall{Which: which, Job: op.Job, Verb: "inserted", Kind: q.args.Kind(),
		One: "job of kind %q", Many: "jobs of kind %q", Per: "job per insert",
		Others:  func(kinds []string) string { return strings.Join(kinds, ", ") },
		Follows: "the job it inserts: call Insert or InsertTx on Producing.Client with the job's args"},
		seen.jobs, func(r *rivertype.JobInsertResult) string { return r.Job.Kind })
	if err != nil || dup.Duplicate {
		return dup, err
	}
	id := strconv.FormatInt(r.Job.ID, 10)
	if r.UniqueSkippedAsDuplicate {
		return queue.Enqueued{JobID: id, Duplicate: true, Reason: fmt.Sprintf("River's UniqueOpts matched job %d (%s)", r.Job.ID, r.Job.State)}, nil
	}
	return queue.Enqueued{JobID: id}, nil
}
