package twicegue

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/vgarvardt/gue/v5"
	"github.com/vgarvardt/gue/v5/adapter/pgxv5"

	"github.com/runtwice/twice/harness/queue"
)

// Producing is what the producer's own code is given for one enqueue of
// the job (Producer): the original's, or one of the producer's copies.
type Producing struct {
	// Client is a gue client on the scenario's database: call Enqueue,
	// or EnqueueTx with Tx (pgxv5.NewTx(p.Tx)), as production calls them
	// on its client.
	Client *gue.Client
	// Tx is a transaction on the scenario's database: it commits when
	// the producer's code returns nil, and rolls back when it returns an
	// error. What the code writes in it is compared as the job's writes
	// are; its statements are not steps.
	Tx pgx.Tx
	// Now is the harness clock at this enqueue: give it to the producer
	// where production reads time.Now(), so what it builds at enqueue
	// time (args stamped with the time, a RunAt) is the copy's.
	Now func() time.Time
	// Copy is 1 for the original enqueue, 2 and up for the producer's
	// copies (faults.ProducerRetry, faults.LateProducerRetry).
	Copy int
}

// Producer runs the producer's own code for every enqueue of the job,
// instead of enqueueing Spec's Args: the original's, and each producer
// copy's at the copy's time on the harness clock (the late-producer-retry
// copy comes harness.Config.ProducerTimeout, 5s, after the original).
// Pass production's function unchanged, wired to p:
//
//	twicegue.Producer(func(ctx context.Context, p twicegue.Producing) error {
//		return orders.Place(ctx, p.Tx, p.Client, 9812)
//	})
//
// The code must enqueue one job of Spec.Type in one call; a copy whose
// code enqueues none was refused by the producer itself and is not
// delivered. gue stamps a job it is given with no RunAt with the wall
// clock's now: such a run_at, and one the code built from time.Now(), is
// moved onto the harness clock by the same distance from the enqueue.
// Spec then serves only to name the job's type.
func Producer(produce func(ctx context.Context, p Producing) error) Option {
	return func(o *options) { o.produce = produce }
}

// wallWindow is how far from gue's created_at (the wall clock) a run_at
// may be and still be taken as built on the wall clock: the harness
// clock starts months away from it.
const wallWindow = 30 * 24 * time.Hour

// produce runs the producer's code for the enqueue op asks for and
// answers with the job of Spec.Type it enqueued.
func (q *gueQueue[T]) produce(ctx context.Context, op queue.Op) (queue.Enqueued, error) {
	which := fmt.Sprintf("twicegue: job %q: the producer's code (twicegue.Producer), enqueue %d", q.name, op.Job)
	known := map[string]bool{}
	rows, err := op.Conn.Query(ctx, `SELECT job_id FROM gue_jobs`)
	if err != nil {
		return queue.Enqueued{}, fmt.Errorf("%s: reading gue's jobs: %w", which, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return queue.Enqueued{}, fmt.Errorf("%s: reading gue's jobs: %w", which, err)
	}
	for _, id := range ids {
		known[id] = true
	}
	pool, err := queue.Pool(ctx, op.Conn, 2)
	if err != nil {
		return queue.Enqueued{}, fmt.Errorf("%s: a pool on the scenario's database: %w", which, err)
	}
	defer pool.Close()
	c, err := gue.NewClient(pgxv5.NewConnPool(pool))
	if err != nil {
		return queue.Enqueued{}, fmt.Errorf("%s: a gue client: %w", which, err)
	}
	tx, err := op.Conn.Begin(ctx)
	if err != nil {
		return queue.Enqueued{}, fmt.Errorf("%s: %w", which, err)
	}
	now := op.Now
	if err := queue.RunProducer(ctx, q.opts.produce, Producing{Client: c, Tx: tx, Now: func() time.Time { return now }, Copy: op.Job}); err != nil {
		_ = tx.Rollback(ctx)
		return queue.Enqueued{}, fmt.Errorf("%s returned: %w", which, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return queue.Enqueued{}, fmt.Errorf("%s: committing its transaction (Producing.Tx): %w", which, err)
	}
	type enqueued struct {
		id, typ          string
		runAt, createdAt time.Time
	}
	rows, err = op.Conn.Query(ctx, `SELECT job_id, job_type, run_at, created_at FROM gue_jobs`)
	if err != nil {
		return queue.Enqueued{}, fmt.Errorf("%s: reading gue's jobs: %w", which, err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (enqueued, error) {
		var e enqueued
		return e, r.Scan(&e.id, &e.typ, &e.runAt, &e.createdAt)
	})
	if err != nil {
		return queue.Enqueued{}, fmt.Errorf("%s: reading gue's jobs: %w", which, err)
	}
	fresh := slices.DeleteFunc(all, func(e enqueued) bool { return known[e.id] })
	e, dup, err := queue.FollowOne(queue.ProducerCall{Which: which, Job: op.Job, Verb: "enqueued", Kind: q.spec.Type,
		One: "job of type %q", Many: "jobs of type %q", Per: "job per enqueue",
		Follows: "the job it enqueues: call Enqueue or EnqueueTx on Producing.Client with Spec.Type"},
		fresh, func(e enqueued) string { return e.typ })
	if err != nil || dup.Duplicate {
		return dup, err
	}
	if d := e.runAt.Sub(e.createdAt); d > -wallWindow && d < wallWindow {
		// Built on the wall clock (gue's default, or time.Now()): the
		// same distance from the enqueue on the harness clock.
		if _, err := op.Conn.Exec(ctx, `UPDATE gue_jobs SET run_at = $2 WHERE job_id = $1`, e.id, now.Add(d).UTC()); err != nil {
			return queue.Enqueued{}, fmt.Errorf("%s: moving job %s's run_at onto the harness clock: %w", which, e.id, err)
		}
	}
	return queue.Enqueued{JobID: e.id}, nil
}
