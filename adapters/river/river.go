// Package twiceriver checks River workers (github.com/riverqueue/river)
// with twice, as River runs them: the job is inserted with River's own
// InsertTx, handed out and completed through River's job states on the
// harness's connection, and Worker.Work runs inside a work context with a
// real river.Client, so ClientFromContext, JobCompleteTx and InsertTx
// with UniqueOpts work as in production. Only the worker's own statements
// are steps; River's bookkeeping is not.
//
//	func TestRewardWorker(t *testing.T) {
//		harness.Check(t, twiceriver.Job("reward-order", points.RewardArgs{OrderID: 9812},
//			func(d *harness.Delivery) river.Worker[points.RewardArgs] {
//				return &points.RewardWorker{Pool: d.DB}
//			},
//			twiceriver.InsertOpts(&river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}})),
//			harness.Config{Setup: []harness.Setup{harness.SQL(points.Schema)}})
//	}
//
// The job carries River's schema: the harness migrates River up (one
// transaction per version, as rivermigrate does) before the config's own
// setup, in harness.Check, harness.Run and harness.Explore alike.
//
// What each fault means for River:
//
//   - crash-before-ack: Work returned, River's completer never ran; the
//     job stays running until River's rescuer makes it retryable: once
//     the attempt started both RescueStuckJobsAfter (1h) and its timeout
//     ago (the worker's Timeout, else the client's JobTimeout, 1 min),
//     due a second later (River's first retry). A job whose timeout is
//     negative is never rescued: it stays running for ever, and the check
//     reports it did not complete. A worker that completes the job with
//     JobCompleteTx in its own transaction is not handed out again.
//   - lost-ack: the same, with the worker alive.
//   - crash-mid-job, ambiguous-commit: the worker dies, or its commit's
//     reply is lost and Work returns the error; the job is retried
//     (retryable) or rescued, as River would.
//   - visibility-timeout: the rescuer hands out a job whose attempt still
//     runs. River cancels that attempt's context at its timeout, before
//     the rescue: a worker that honours its context stops there; only one
//     that ignores it overlaps a second attempt. With no timeout there is
//     no rescue and no second attempt.
//   - concurrent-delivery: River never hands out a running job before its
//     rescue, so the second delivery is "not delivered".
//   - producer-retry: the job is inserted twice; with UniqueOpts the copy
//     is refused as a duplicate and never delivered. late-producer-retry
//     inserts the copy after the original completed, the producer's
//     timeout (5s) later: with Producer, the producer's own code builds
//     its args and InsertOpts at that time.
//   - redrive: JobRetry days later, after the rescuer, of a job River
//     does not show completed.
//
// The job's own river_job row and River's tables are left out of the
// comparison; rows the worker inserts into river_job (child jobs) are
// compared.
//
// README.md in this directory (github.com/runtwice/twice/adapters/river) has
// the versions this adapter is tested on, its example and what each
// fault found there, and how to use it from a clone.
package twiceriver

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
)

// River's defaults, which the check models unless an Option says
// otherwise.
const (
	// DefaultRescueAfter is River's RescueStuckJobsAfter: the rescuer
	// looks at a running job this long after its attempt started (or
	// JobTimeout plus an hour, when the client's JobTimeout is longer).
	DefaultRescueAfter = time.Hour
	// DefaultTimeout is River's JobTimeout: a worker's context is
	// cancelled this long after its attempt started, unless the worker's
	// own Timeout says otherwise.
	DefaultTimeout = time.Minute
)

// Option changes how a River job is checked.
type Option func(*options)

type options struct {
	insert      *river.InsertOpts
	rescueAfter time.Duration
	jobTimeout  time.Duration
	workers     *river.Workers
	argsFor     any // func(int, time.Time) T, from ArgsPerEnqueue
	produce     func(context.Context, Producing) error
	schema      string // River's tables' schema; empty for the search path's
}

// InsertOpts are the options the producer inserts the job with: its
// queue, priority, max attempts, ScheduledAt, and UniqueOpts, under which
// a producer's copy is refused as a duplicate.
func InsertOpts(opts *river.InsertOpts) Option {
	return func(o *options) { o.insert = opts }
}

// RescueAfter is the client's RescueStuckJobsAfter: how long after an
// attempt started River's rescuer looks at a job that is still running.
// It rescues the job only once the attempt's timeout has passed as well
// (the worker's Timeout, or the client's JobTimeout), and never when that
// timeout is negative.
func RescueAfter(d time.Duration) Option {
	return func(o *options) { o.rescueAfter = d }
}

// JobTimeout is the client's JobTimeout: how long River lets an attempt
// of a worker whose Timeout is 0 run before it cancels the worker's
// context; -1 for never. Zero is River's default, one minute. A worker's
// own Timeout, read from the worker as River reads it, takes precedence.
func JobTimeout(d time.Duration) Option {
	return func(o *options) { o.jobTimeout = d }
}

// Workers is the workers bundle of the production client that works the
// job. The job's own insert and the delivery's client then check kinds as
// River does: a job, or a child job the worker inserts (InsertTx), of a
// kind no worker in the bundle serves fails with river's "job kind is not
// registered" error, as in production, instead of passing the check.
// Without it the clients are insert-only, which check no kinds.
func Workers(w *river.Workers) Option {
	return func(o *options) { o.workers = w }
}

// ArgsPerEnqueue builds the args for each insert of the job, as a producer
// that retries builds them again: copy is 1 for the original and 2 and up
// for the producer's copies (faults.ProducerRetry), now is the harness
// clock at the insert. A producer that stamps its args (a RequestedAt)
// gives each copy other args, so River's UniqueOpts{ByArgs: true} no
// longer matches the original: the check then finds the copy runs again.
// T must be the job's args type; Job's args are used for nothing else
// than the worker's Timeout then.
func ArgsPerEnqueue[T river.JobArgs](f func(copy int, now time.Time) T) Option {
	return func(o *options) { o.argsFor = f }
}

// Schema is the PostgreSQL schema River's tables are in, as the
// production client's Config.Schema and rivermigrate's Config.Schema
// name it ("metadata"); without it, the connection's search path
// (public). The check migrates River into it, creating the schema if the
// database has none, and every River client and statement of the check
// uses it. Tables of the schema other than River's are compared as the
// job's are.
func Schema(name string) Option {
	return func(o *options) { o.schema = name }
}

// schema is River's: its migrations, up, one transaction per version, as
// rivermigrate does (one transaction for all of them fails: version 4
// adds an enum value that version 6 uses).
var schema = queue.Schema{Name: "twiceriver: River's migrations, up", Apply: func(ctx context.Context, conn *pgx.Conn) error { return migrate(ctx, conn, "") }}

// schemaIn is River's schema migrated into the PostgreSQL schema name.
func schemaIn(name string) queue.Schema {
	return queue.Schema{Name: fmt.Sprintf("twiceriver: River's migrations, up, in schema %q", name), Apply: func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
			return fmt.Errorf("twiceriver: creating schema %q for River's tables: %w", name, err)
		}
		return migrate(ctx, conn, name)
	}}
}

func migrate(ctx context.Context, conn *pgx.Conn, in string) error {
	pool, err := queue.Pool(ctx, conn, 0)
	if err != nil {
		return fmt.Errorf("twiceriver: a pool for River's migrator: %w", err)
	}
	defer pool.Close()
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: quiet, Schema: in})
	if err != nil {
		return fmt.Errorf("twiceriver: River's migrator: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("twiceriver: migrating River's schema up: %w", err)
	}
	return nil
}

var quiet = slog.New(slog.DiscardHandler)

// txDriver is River's driver for the statements the check runs on the
// harness's connection, shared by every job and scenario as River shares
// one driver per pool: its SQL template cache then renders each of
// River's statements once, and they reach pgx's statement cache with the
// same text every time.
var txDriver = riverpgxv5.New(nil)

// Job is a River job for harness.Check, harness.Explore and the runner:
// args are the job's arguments, inserted by the producer as River would,
// and newWorker builds the worker for each delivery from the delivery's
// connections (d.DB, d.DSN, d.SQL) and clock (d.Now), as the worker's
// process would at start-up. The worker's Work runs with a river.Client
// on the delivery's pool in its context. The job carries River's schema,
// migrated before the config's own setup.
//
// River's rescuer and executor read the worker's Timeout (and NextRetry),
// so the check reads them too: newWorker is called once more, outside any
// delivery, for the worker River's rescuer would ask (its Delivery has no
// connections and no clock; keep them, do not use them, in newWorker).
// An attempt's context is cancelled at that timeout, and a running job is
// rescued only once both RescueAfter and the timeout have passed, never
// when the timeout is negative: a worker with no timeout that dies
// mid-attempt leaves its job running for ever, which the check reports as
// a job that did not complete.
func Job[T river.JobArgs](name string, args T, newWorker func(d *harness.Delivery) river.Worker[T], opts ...Option) harness.Job {
	o := options{}
	for _, opt := range opts {
		opt(&o)
	}
	q := &riverQueue[T]{name: name, args: args, opts: o}
	q.lockSQL = fmt.Sprintf(lockSQL, pgx.Identifier{"river_job"}.Sanitize())
	if o.schema != "" {
		q.lockSQL = fmt.Sprintf(lockSQL, pgx.Identifier{o.schema, "river_job"}.Sanitize())
	}
	q.err = q.resolve(newWorker)
	if q.err == nil {
		q.reader, q.err = client(txDriver, time.Now, nil, o.schema)
	}
	return harness.Job{
		Name:    name,
		Queue:   q,
		Handler: func(ctx context.Context, d *harness.Delivery) error { return q.work(ctx, d, newWorker) },
	}
}

// riverQueue is River's bookkeeping for one job, as a queue.Queue.
type riverQueue[T river.JobArgs] struct {
	name string
	args T
	opts options

	argsFor func(int, time.Time) T
	// rescuer is the worker River's rescuer and executor ask for its
	// Timeout and NextRetry; timeout is the attempt's timeout as River
	// resolves it (the worker's, else the client's JobTimeout), negative
	// for none; rescueAfter is the client's RescueStuckJobsAfter.
	rescuer     river.Worker[T]
	timeout     time.Duration
	rescueAfter time.Duration
	// reader is a River client for what reads no clock (JobGetTx),
	// built once per job as River's client is per driver.
	reader *river.Client[pgx.Tx]
	// inserters are the producer's River clients, each used by one
	// Enqueue at a time at that Enqueue's time.
	inserters inserters
	// lockSQL is lockSQL on River's job table in its schema.
	lockSQL string
	// err is what is wrong with the job's options or worker, returned
	// by its first Enqueue.
	err error
}

// resolve reads the client's timing as River's NewClient resolves it and
// the worker's Timeout as River's rescuer reads it.
func (q *riverQueue[T]) resolve(newWorker func(*harness.Delivery) river.Worker[T]) error {
	o := q.opts
	if o.argsFor != nil && o.produce != nil {
		return fmt.Errorf("twiceriver: job %q: both ArgsPerEnqueue and Producer say how the job is inserted; pass Producer alone, whose code builds the args", q.name)
	}
	if o.argsFor != nil {
		f, ok := o.argsFor.(func(int, time.Time) T)
		if !ok {
			var zero T
			return fmt.Errorf("twiceriver: job %q: ArgsPerEnqueue builds %s, but the job's args are %T; pass twiceriver.ArgsPerEnqueue[%T]", q.name, funcResult(o.argsFor), zero, zero)
		}
		q.argsFor = f
	}
	// River's own validation of its timing options and schema.
	if _, err := river.NewClient(txDriver, &river.Config{Logger: quiet, JobTimeout: o.jobTimeout, RescueStuckJobsAfter: o.rescueAfter, Schema: o.schema}); err != nil {
		return fmt.Errorf("twiceriver: job %q: River refuses JobTimeout %v with RescueAfter %v and Schema %q: %w", q.name, o.jobTimeout, o.rescueAfter, o.schema, err)
	}
	jobTimeout := cmp.Or(o.jobTimeout, DefaultTimeout)
	q.rescueAfter = o.rescueAfter
	if q.rescueAfter == 0 {
		q.rescueAfter = DefaultRescueAfter
		if jobTimeout > DefaultRescueAfter {
			q.rescueAfter = jobTimeout + DefaultRescueAfter
		}
	}
	w, err := probe(newWorker)
	if err != nil {
		return fmt.Errorf("twiceriver: job %q: %w", q.name, err)
	}
	q.rescuer = w
	q.timeout = cmp.Or(w.Timeout(q.probeJob()), jobTimeout)
	return nil
}

func funcResult(f any) string {
	t := reflect.TypeOf(f)
	if t == nil || t.Kind() != reflect.Func || t.NumOut() != 1 {
		return fmt.Sprintf("%T", f)
	}
	return t.Out(0).String()
}

// probe builds the worker River's rescuer would ask, outside any delivery.
func probe[T river.JobArgs](newWorker func(*harness.Delivery) river.Worker[T]) (w river.Worker[T], err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("newWorker panicked when twiceriver built the worker, outside any delivery, to read its Timeout as River's rescuer does: %v; build the worker from the delivery's fields without calling them (keep d.DB, d.Now as they are) so it can be built before a delivery", p)
		}
	}()
	w = newWorker(&harness.Delivery{Kind: queue.DeliveryFirst})
	if w == nil {
		return nil, errors.New("newWorker returned a nil worker")
	}
	return w, nil
}

// probeJob is the job as the producer inserts it, before any attempt.
func (q *riverQueue[T]) probeJob() *river.Job[T] {
	encoded, _ := json.Marshal(q.args)
	return &river.Job[T]{JobRow: &rivertype.JobRow{Kind: q.args.Kind(), EncodedArgs: encoded, State: rivertype.JobStateAvailable}, Args: q.args}
}

// jobOf rebuilds River's Job from a row the queue handed out.
func (q *riverQueue[T]) jobOf(row *rivertype.JobRow) (*river.Job[T], error) {
	var args T
	if err := json.Unmarshal(row.EncodedArgs, &args); err != nil {
		return nil, fmt.Errorf("twiceriver: job %q, River job %d (attempt %d): its args %s do not decode into %T: %w", q.name, row.ID, row.Attempt, row.EncodedArgs, args, err)
	}
	return &river.Job[T]{JobRow: row, Args: args}, nil
}

// clock is River's time: the harness clock.
type clock func() time.Time

// Now is the harness clock's time.
func (c clock) Now() time.Time { return c() }

// NowOrNil is the harness clock's time: River's time is always stubbed.
func (c clock) NowOrNil() *time.Time {
	t := c().UTC()
	return &t
}

// NowUTC is the harness clock's time, for River before v0.24, whose
// TimeGenerator is named so.
func (c clock) NowUTC() time.Time { return c().UTC() }

// NowUTCOrNil is NowOrNil, for River before v0.24.
func (c clock) NowUTCOrNil() *time.Time { return c.NowOrNil() }

// client is a River client that never works jobs (it has no queues);
// with a nil pool it only runs in the transactions it is given. With
// workers, its inserts check the job's kind against them.
func client(pool riverdriver.Driver[pgx.Tx], now func() time.Time, workers *river.Workers, schema string) (*river.Client[pgx.Tx], error) {
	return river.NewClient(pool, &river.Config{Logger: quiet, Test: river.TestConfig{Time: clock(now)}, Workers: workers, Schema: schema})
}

// inserters keeps the producer's River clients of one job, so that a
// check builds a few of them, as a producer process keeps one, instead of
// one per Enqueue: River then limits its insert notifications as it does
// in production (one per queue per FetchCooldown), rather than sending
// one per job. Each runs at the time of the Enqueue that took it.
type inserters struct {
	mu   sync.Mutex
	free []*inserter
}

// inserter is a River client whose clock reads the time of the Enqueue
// that uses it.
type inserter struct {
	client *river.Client[pgx.Tx]
	now    atomic.Pointer[time.Time]
}

// take returns a client no other Enqueue uses, at time now.
func (p *inserters) take(now time.Time, workers *river.Workers, schema string) (*inserter, error) {
	p.mu.Lock()
	var in *inserter
	if n := len(p.free); n > 0 {
		in, p.free = p.free[n-1], p.free[:n-1]
	}
	p.mu.Unlock()
	if in == nil {
		in = &inserter{}
		c, err := client(txDriver, func() time.Time { return *in.now.Load() }, workers, schema)
		if err != nil {
			return nil, err
		}
		in.client = c
	}
	in.now.Store(&now)
	return in, nil
}

// give returns in for a later Enqueue.
func (p *inserters) give(in *inserter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = append(p.free, in)
}

// work runs one delivery: it rebuilds River's Job from the row the
// queue handed out and calls the worker's Work in a work context.
func (q *riverQueue[T]) work(ctx context.Context, d *harness.Delivery, newWorker func(*harness.Delivery) river.Worker[T]) error {
	row, ok := d.Queued.(*rivertype.JobRow)
	if !ok || row == nil {
		return fmt.Errorf("twiceriver: job %q delivery of job %s: the delivery carries no River job row (%T); run it through twiceriver.Job", q.name, d.JobID, d.Queued)
	}
	job, err := q.jobOf(row)
	if err != nil {
		return err
	}
	w := newWorker(d)
	if w == nil {
		return fmt.Errorf("twiceriver: job %q, River job %d (attempt %d): newWorker returned a nil worker", q.name, row.ID, row.Attempt)
	}
	if got := cmp.Or(w.Timeout(job), cmp.Or(q.opts.jobTimeout, DefaultTimeout)); got != q.timeout {
		return fmt.Errorf("twiceriver: job %q, River job %d (attempt %d): worker %T's timeout is %v on this delivery but was %v for the worker built before any delivery, which River's rescuer asks; the check times River's cancellation and rescue by one timeout, so make Timeout depend on neither the delivery nor the attempt",
			q.name, row.ID, row.Attempt, w, got, q.timeout)
	}
	c, err := client(riverpgxv5.New(d.DB), d.Now, q.opts.workers, q.opts.schema)
	if err != nil {
		return fmt.Errorf("twiceriver: job %q: a River client for the delivery: %w", q.name, err)
	}
	which := fmt.Sprintf("twiceriver: job %q, River job %d (kind %q, attempt %d, %s)", q.name, row.ID, row.Kind, row.Attempt, d.Kind)
	err = work(rivertest.WorkContext(ctx, c), w, job, which)
	if errors.Is(err, rivertype.ErrNotFound) {
		// The job is running in the scenario's database, where Fetch
		// just locked it: a JobCompleteTx that finds no job ran in a
		// transaction on another database.
		return fmt.Errorf("%s: Work returned %w; but job %d is running in the scenario's database, so the JobCompleteTx that found no job ran in a transaction on another database: the worker writes through a pool of its own (a global pool, a DSN from the environment), not the delivery's; build the worker from d.DB, d.DSN or d.SQL() in newWorker",
			which, err, row.ID)
	}
	return err
}

// work calls w.Work; a panic is an error naming the job and the delivery,
// as River's executor records a panic as the attempt's error.
func work[T river.JobArgs](ctx context.Context, w river.Worker[T], job *river.Job[T], which string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: Work panicked: %v\n%s", which, p, debug.Stack())
		}
	}()
	return w.Work(ctx, job)
}

// Schema is River's, migrated up.
func (q *riverQueue[T]) Schema() queue.Schema {
	if q.opts.schema != "" {
		return schemaIn(q.opts.schema)
	}
	return schema
}

// table is River's table name as the check's snapshot names it:
// qualified by its schema outside public.
func (q *riverQueue[T]) table(name string) string {
	if q.opts.schema == "" || q.opts.schema == "public" {
		return name
	}
	return q.opts.schema + "." + name
}

// firstRetry is River's retry delay for a job with no errors yet: a job
// the rescuer makes retryable is due this long after the rescue (River's
// 10% jitter left out, so runs compare).
const firstRetry = time.Second

// Rules are River's rescuer and job timeout, its unique states, and its
// tables. The harness asks for a job again once River's rescuer could
// have rescued it (RescueAfter and the attempt's timeout both passed) and
// its first retry is due; the attempt's context is cancelled at its
// timeout. With no timeout, River never rescues the job; the harness
// asks after RescueAfter and is refused.
func (q *riverQueue[T]) Rules() queue.Rules {
	r := queue.Rules{
		Redeliver:   q.rescueAfter,
		Dedup:       q.dedup(),
		Tables:      []string{q.table("river_migration"), q.table("river_leader"), q.table("river_queue"), q.table("river_client"), q.table("river_client_queue"), q.table("river_notification")},
		JobTable:    q.table("river_job"),
		JobIDColumn: "id",
		// Fetch moves the job to running, and hands out a running job
		// only once the rescuer would (Redeliver).
		OneDeliveryAtATime: true,
	}
	if q.timeout > 0 {
		r.CancelAfter = q.timeout
		r.Redeliver = max(q.rescueAfter, q.timeout) + firstRetry
	}
	return r
}

// dedup is how long River refuses a producer's copy: UniqueOpts.ByPeriod,
// or, without a period, while the original is in River's unique states.
//
// The producer's code (Producer) sets its own UniqueOpts, which the check
// cannot read before it runs: it is taken to dedup while the original
// is held, so the late copy is tried (and, for a producer with no
// UniqueOpts, handed out as the early copy is); InsertOpts with the same
// UniqueOpts beside it gives a ByPeriod window to try past.
func (q *riverQueue[T]) dedup() time.Duration {
	if q.opts.insert == nil && q.opts.produce != nil {
		return -1
	}
	if q.opts.insert == nil {
		return 0
	}
	u := q.opts.insert.UniqueOpts
	switch {
	case u.ByPeriod > 0:
		return u.ByPeriod
	case u.ByArgs || u.ByQueue || len(u.ByState) > 0:
		return -1
	}
	return 0
}

// Enqueue inserts the job with River's InsertTx, as the producer does,
// with the args ArgsPerEnqueue builds for this copy if it is given, or
// runs the producer's own code (Producer).
func (q *riverQueue[T]) Enqueue(ctx context.Context, op queue.Op) (queue.Enqueued, error) {
	if q.err != nil {
		return queue.Enqueued{}, q.err
	}
	if q.opts.produce != nil {
		return q.produce(ctx, op)
	}
	args := q.args
	if q.argsFor != nil {
		args = q.argsFor(op.Job, op.Now)
	}
	c, err := q.inserters.take(op.Now, q.opts.workers, q.opts.schema)
	if err != nil {
		return queue.Enqueued{}, err
	}
	defer q.inserters.give(c)
	// River's insert and its notify are one statement each, so they need
	// no transaction of their own around them: the producer's is not
	// the check's to model, and BEGIN and COMMIT would cost two round
	// trips per job.
	return func(tx pgx.Tx) (queue.Enqueued, error) {
		res, err := c.client.InsertTx(ctx, tx, args, q.opts.insert)
		if err != nil {
			if q.opts.workers != nil && strings.Contains(err.Error(), "not registered") {
				return queue.Enqueued{}, fmt.Errorf("inserting %s args %+v: %w; the production client's workers bundle (twiceriver.Workers) has no worker for the job's own kind %q, so River refuses the insert in production too: add the worker with river.AddWorker", args.Kind(), args, err, args.Kind())
			}
			return queue.Enqueued{}, fmt.Errorf("inserting %s args %+v: %w", args.Kind(), args, err)
		}
		if res.UniqueSkippedAsDuplicate {
			return queue.Enqueued{JobID: strconv.FormatInt(res.Job.ID, 10), Duplicate: true,
				Reason: fmt.Sprintf("River's UniqueOpts matched job %d (%s)", res.Job.ID, res.Job.State)}, nil
		}
		return queue.Enqueued{JobID: strconv.FormatInt(res.Job.ID, 10)}, nil
	}(queue.Autocommit(op.Conn))
}

// Fetch hands the job out as River's producer and maintenance services
// would at op.Now: a redrive is River's JobRetry; a running job is
// rescued first, as River's rescuer decides; then the job is locked for a
// new attempt if it is available, retryable or scheduled and due. A job
// not yet due is answered with its DueAt.
//
// Each of River's statements commits on its own, as River's producer,
// rescuer and JobRetry run them on their pool, not in one transaction:
// the queue's operations are serialised with the executor, so no step of
// a worker runs between them.
func (q *riverQueue[T]) Fetch(ctx context.Context, op queue.Op) (queue.Fetched, error) {
	id, err := strconv.ParseInt(op.JobID, 10, 64)
	if err != nil {
		return queue.Fetched{}, fmt.Errorf("job ID %q is not River's: %w", op.JobID, err)
	}
	if q.err != nil {
		return queue.Fetched{}, q.err
	}
	tx := queue.Autocommit(op.Conn)
	if op.Kind == queue.DeliveryRedrive {
		return q.redrive(ctx, tx, id, op.Now)
	}
	// River's producer locks an available job in one statement of its
	// own; the rescuer touches only running jobs (its JobGetStuck reads
	// state = 'running'), so when the job can be locked at once, or is
	// in any other state than running, a rescue first would have changed
	// nothing.
	f, row, err := q.lockAndRead(ctx, tx, id, op.Now)
	if err != nil || f.Delivered || row.State != rivertype.JobStateRunning {
		return f, err
	}
	rescued, err := q.rescue(ctx, tx, id, op.Now)
	if err != nil {
		return queue.Fetched{}, fmt.Errorf("rescuing job %d as River's rescuer would: %w", id, err)
	}
	if !rescued {
		return f, nil
	}
	f, _, err = q.lockAndRead(ctx, tx, id, op.Now)
	return f, err
}

// redrive is a person's JobRetry of job id at now, after River's rescuer,
// then the producer's lock: a job River shows completed has nothing to
// redrive.
func (q *riverQueue[T]) redrive(ctx context.Context, tx pgx.Tx, id int64, now time.Time) (queue.Fetched, error) {
	if _, err := q.rescue(ctx, tx, id, now); err != nil {
		return queue.Fetched{}, fmt.Errorf("rescuing job %d as River's rescuer would: %w", id, err)
	}
	row, err := q.reader.JobGetTx(ctx, tx, id)
	if err != nil {
		return queue.Fetched{}, fmt.Errorf("reading job %d: %w", id, err)
	}
	if row.State == rivertype.JobStateCompleted {
		return queue.Fetched{Done: true, Reason: fmt.Sprintf("River job %d is completed, so nobody redrives it", id)}, nil
	}
	// JobRetry reads River's clock: a producer's client, at now.
	retrier, err := q.inserters.take(now, q.opts.workers, q.opts.schema)
	if err != nil {
		return queue.Fetched{}, err
	}
	defer q.inserters.give(retrier)
	if _, err := retrier.client.JobRetryTx(ctx, tx, id); err != nil {
		return queue.Fetched{}, fmt.Errorf("JobRetry of job %d: %w", id, err)
	}
	f, _, err := q.lockAndRead(ctx, tx, id, now)
	return f, err
}

// lockAndRead locks job id for a new attempt, as River's producer does,
// and reads it with River's JobGetTx, in one round trip: the job is
// delivered if the lock took it, and otherwise the row says why not.
func (q *riverQueue[T]) lockAndRead(ctx context.Context, tx pgx.Tx, id int64, now time.Time) (queue.Fetched, *rivertype.JobRow, error) {
	lt := &lockThenRead{Tx: tx, id: id, now: now, lock: q.lockSQL}
	row, err := q.reader.JobGetTx(ctx, lt, id)
	if lt.err != nil {
		return queue.Fetched{}, nil, lt.err
	}
	if err != nil {
		return queue.Fetched{}, nil, fmt.Errorf("reading job %d: %w", id, err)
	}
	if lt.tag.RowsAffected() == 1 {
		return queue.Fetched{Delivered: true, Attempt: row.Attempt, Job: row}, row, nil
	}
	return q.notFetched(row, now), row, nil
}

// lockThenRead is the harness's connection as the pgx.Tx River's JobGetTx
// reads the job on, with the lock sent ahead of River's query in the same
// pipeline (one implicit transaction): tag is the lock's, err its error.
type lockThenRead struct {
	pgx.Tx
	id   int64
	now  time.Time
	lock string
	tag  pgconn.CommandTag
	err  error
}

// QueryRow sends the lock and River's query together; the row's Scan
// reads both answers.
func (t *lockThenRead) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	b := &pgx.Batch{}
	b.Queue(t.lock, t.id, t.now)
	b.Queue(sql, args...)
	return &lockedRow{t: t, br: t.SendBatch(ctx, b)}
}

// lockedRow is River's row after the lock's answer.
type lockedRow struct {
	t  *lockThenRead
	br pgx.BatchResults
}

func (r *lockedRow) Scan(dest ...any) error {
	tag, err := r.br.Exec()
	if err != nil {
		_ = r.br.Close()
		r.t.err = fmt.Errorf("fetching job %d: %w", r.t.id, err)
		return r.t.err
	}
	r.t.tag = tag
	if err := r.br.QueryRow().Scan(dest...); err != nil {
		_ = r.br.Close()
		return err
	}
	return r.br.Close()
}

// lockSQL moves job $1 to running for a new attempt if it is available,
// retryable or scheduled and due at $2, as River's producer does, in
// River's schema (riverQueue.lockSQL).
const lockSQL = `
		UPDATE %s SET
			state = 'running',
			attempt = attempt + 1,
			attempted_at = $2::timestamptz,
			attempted_by = array_append(coalesce(attempted_by, '{}'), 'twice')
		WHERE id = $1 AND state IN ('available', 'retryable', 'scheduled') AND scheduled_at <= $2::timestamptz`

// rescue is River's JobRescuer (internal/maintenance/job_rescuer.go) on
// one job, through River's driver: JobGetStuck finds it running since
// before now-RescueAfter; a job whose cancellation was attempted is
// cancelled; one whose attempt's timeout is negative, or has not passed,
// is left running; otherwise it is retryable at the worker's NextRetry or
// River's retry delay, or discarded after its last attempt. The rescue is
// dated where River's rescuer could first make it. rescued says
// JobRescueMany ran.
func (q *riverQueue[T]) rescue(ctx context.Context, tx pgx.Tx, id int64, now time.Time) (rescued bool, err error) {
	exec := txDriver.UnwrapExecutor(tx)
	horizon := now.Add(-q.rescueAfter)
	stuck, err := exec.JobGetStuck(ctx, &riverdriver.JobGetStuckParams{Max: 1000, StuckHorizon: horizon, Schema: q.opts.schema})
	if err != nil {
		return false, err
	}
	for _, row := range stuck {
		if row.ID != id || row.AttemptedAt == nil {
			continue
		}
		var meta struct {
			CancelAttemptedAt time.Time `json:"cancel_attempted_at"`
		}
		if len(row.Metadata) > 0 {
			if err := json.Unmarshal(row.Metadata, &meta); err != nil {
				return false, fmt.Errorf("reading the job's metadata %s: %w", row.Metadata, err)
			}
		}
		at := row.AttemptedAt.Add(max(q.rescueAfter, q.timeout))
		if meta.CancelAttemptedAt.IsZero() && (q.timeout < 0 || now.Sub(*row.AttemptedAt) < q.timeout) {
			return false, nil // River: jobRetryDecisionIgnore.
		}
		errData, err := json.Marshal(rivertype.AttemptError{At: at, Attempt: max(row.Attempt, 0), Error: "Stuck job rescued by JobRescuer"})
		if err != nil {
			return false, err
		}
		state, finalized, scheduled := rivertype.JobStateRetryable, time.Time{}, q.nextRetry(row, at)
		switch {
		case !meta.CancelAttemptedAt.IsZero():
			state, finalized, scheduled = rivertype.JobStateCancelled, at, row.ScheduledAt
		case row.Attempt >= max(row.MaxAttempts, 0):
			state, finalized, scheduled = rivertype.JobStateDiscarded, at, row.ScheduledAt
		}
		params := &riverdriver.JobRescueManyParams{
			ID: []int64{id}, Error: [][]byte{errData}, FinalizedAt: []*time.Time{&finalized},
			ScheduledAt: []time.Time{scheduled}, State: []string{string(state)}, Schema: q.opts.schema,
		}
		// Newer River (v0.51.2 does) rescues only jobs still stuck at the horizon
		// (a guard against a job that finished meanwhile); before, the
		// field does not exist. Set it where it does, so the adapter
		// works on every River version it supports.
		if f := reflect.ValueOf(params).Elem().FieldByName("StuckHorizon"); f.IsValid() && f.Type() == reflect.TypeFor[time.Time]() {
			f.Set(reflect.ValueOf(horizon))
		}
		if _, err := exec.JobRescueMany(ctx, params); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, nil
}

// nextRetry is when River retries row after a failure at now: the
// worker's NextRetry, else River's default retry policy, (errors+1)⁴
// seconds (its 10% jitter left out, so runs compare).
func (q *riverQueue[T]) nextRetry(row *rivertype.JobRow, now time.Time) time.Time {
	if q.rescuer != nil {
		if job, err := q.jobOf(row); err == nil {
			if t := q.rescuer.NextRetry(job); !t.IsZero() {
				return t
			}
		}
	}
	return now.Add(time.Duration(math.Pow(float64(len(row.Errors)+1), 4)) * time.Second)
}

// notFetched says why River would not hand row out at now.
func (q *riverQueue[T]) notFetched(row *rivertype.JobRow, now time.Time) queue.Fetched {
	switch row.State {
	case rivertype.JobStateCompleted, rivertype.JobStateCancelled:
		return queue.Fetched{Done: true, Reason: fmt.Sprintf("River job %d is %s", row.ID, row.State)}
	case rivertype.JobStateRunning:
		if q.timeout < 0 {
			return queue.Fetched{Reason: fmt.Sprintf("River job %d is running (attempt %d); its worker has no timeout, so River's rescuer never hands it out again", row.ID, row.Attempt)}
		}
		return queue.Fetched{Reason: fmt.Sprintf("River job %d is running (attempt %d); its rescuer hands it out again only %v after the attempt started", row.ID, row.Attempt, max(q.rescueAfter, q.timeout))}
	case rivertype.JobStateDiscarded:
		return queue.Fetched{Reason: fmt.Sprintf("River job %d is discarded after %d attempts", row.ID, row.Attempt)}
	}
	f := queue.Fetched{Reason: fmt.Sprintf("River job %d is %s until %s", row.ID, row.State, row.ScheduledAt.Sub(now))}
	if row.ScheduledAt.After(now) {
		f.DueAt = row.ScheduledAt
	}
	return f
}

// Ack is River's completer after Work returned nil.
func (q *riverQueue[T]) Ack(ctx context.Context, op queue.Op) (queue.Settled, error) {
	row, err := rowOf(op)
	if err != nil {
		return queue.Settled{}, err
	}
	return q.setState(ctx, op, riverdriver.JobSetStateCompleted(row.ID, op.Now, nil), false)
}

// schedulerInterval is River's JobSchedulerIntervalDefault: River's
// executor makes a job due within it available at once rather than
// retryable or scheduled (internal/jobexecutor/job_executor.go), as the
// scheduler would make it available before its next run anyway.
const schedulerInterval = 5 * time.Second

// Nack is River's executor after Work returned err: a snooze, a
// cancellation, a discard after the last attempt, or a retry at the
// worker's NextRetry or after the default retry policy's delay
// ((errors+1)⁴ seconds; River adds up to 10% jitter, which the check
// leaves out so runs compare).
func (q *riverQueue[T]) Nack(ctx context.Context, op queue.Op, werr error) (queue.Settled, error) {
	row, err := rowOf(op)
	if err != nil {
		return queue.Settled{}, err
	}
	var snooze *rivertype.JobSnoozeError
	if errors.As(werr, &snooze) {
		meta, err := snoozes(row.Metadata)
		if err != nil {
			return queue.Settled{}, err
		}
		at := op.Now.Add(snooze.Duration)
		if snooze.Duration <= schedulerInterval {
			return q.setState(ctx, op, riverdriver.JobSetStateSnoozedAvailable(row.ID, at, row.Attempt-1, meta), true)
		}
		return q.setState(ctx, op, riverdriver.JobSetStateSnoozed(row.ID, at, row.Attempt-1, meta), true)
	}
	errData, err := json.Marshal(rivertype.AttemptError{At: op.Now, Attempt: row.Attempt, Error: werr.Error()})
	if err != nil {
		return queue.Settled{}, err
	}
	var cancel *rivertype.JobCancelError
	switch {
	case errors.As(werr, &cancel):
		return q.setState(ctx, op, riverdriver.JobSetStateCancelled(row.ID, op.Now, errData, nil), false)
	case row.Attempt >= row.MaxAttempts:
		return q.setState(ctx, op, riverdriver.JobSetStateDiscarded(row.ID, op.Now, errData, nil), false)
	}
	at := q.nextRetry(row, op.Now)
	if at.Sub(op.Now) <= schedulerInterval {
		return q.setState(ctx, op, riverdriver.JobSetStateErrorAvailable(row.ID, at, errData, nil), false)
	}
	return q.setState(ctx, op, riverdriver.JobSetStateErrorRetryable(row.ID, at, errData, nil), false)
}

func rowOf(op queue.Op) (*rivertype.JobRow, error) {
	row, ok := op.Queued.(*rivertype.JobRow)
	if !ok || row == nil {
		return nil, fmt.Errorf("the delivery of job %s carries no River job row (%T)", op.JobID, op.Queued)
	}
	return row, nil
}

// snoozes is River's metadata update for one more snooze.
func snoozes(metadata []byte) ([]byte, error) {
	var m struct {
		Snoozes int64 `json:"snoozes"`
	}
	if len(metadata) > 0 {
		if err := json.Unmarshal(metadata, &m); err != nil {
			return nil, fmt.Errorf("reading the job's metadata %s: %w", metadata, err)
		}
	}
	return json.Marshal(map[string]int64{"snoozes": m.Snoozes + 1})
}

// setState runs River's own JobSetStateIfRunningMany, as its completer
// does, in one statement of its own on the connection as the completer
// runs it on its pool: a job no longer running (completed in the worker's
// transaction, taken by another attempt) is left as it is. It reports the
// state the job is in afterwards; snooze says p is a snooze.
func (q *riverQueue[T]) setState(ctx context.Context, op queue.Op, p *riverdriver.JobSetStateIfRunningParams, snooze bool) (queue.Settled, error) {
	return func(tx pgx.Tx) (queue.Settled, error) {
		rows, err := txDriver.UnwrapExecutor(tx).JobSetStateIfRunningMany(ctx, &riverdriver.JobSetStateIfRunningManyParams{
			ID:              []int64{p.ID},
			Attempt:         []*int{p.Attempt},
			ErrData:         [][]byte{p.ErrData},
			FinalizedAt:     []*time.Time{p.FinalizedAt},
			MetadataDoMerge: []bool{len(p.MetadataUpdates) > 0},
			MetadataUpdates: [][]byte{p.MetadataUpdates},
			ScheduledAt:     []*time.Time{p.ScheduledAt},
			State:           []rivertype.JobState{p.State},
			Schema:          q.opts.schema,
		})
		if err != nil {
			return queue.Settled{}, fmt.Errorf("setting job %d %s: %w", p.ID, p.State, err)
		}
		if len(rows) != 1 {
			return queue.Settled{}, fmt.Errorf("setting job %d %s: River returned %d rows", p.ID, p.State, len(rows))
		}
		row := rows[0]
		if snooze && row.State == p.State {
			after := max(row.ScheduledAt.Sub(op.Now), 0)
			return queue.Settled{Outcome: queue.Snoozed, After: after, Detail: fmt.Sprintf("for %v", after)}, nil
		}
		return settled(row, op.Now, q.Rules().Redeliver), nil
	}(queue.Autocommit(op.Conn))
}

// settled reads the job's state after the completer ran.
func settled(row *rivertype.JobRow, now time.Time, rescue time.Duration) queue.Settled {
	after := max(row.ScheduledAt.Sub(now), 0)
	switch row.State {
	case rivertype.JobStateCompleted:
		return queue.Settled{Outcome: queue.Completed}
	case rivertype.JobStateCancelled:
		return queue.Settled{Outcome: queue.Cancelled}
	case rivertype.JobStateDiscarded:
		return queue.Settled{Outcome: queue.Discarded, Detail: fmt.Sprintf("after %d of %d attempts", row.Attempt, row.MaxAttempts)}
	case rivertype.JobStateRunning:
		return queue.Settled{Outcome: queue.Retry, After: rescue, Detail: fmt.Sprintf("attempt %d holds the job", row.Attempt)}
	}
	return queue.Settled{Outcome: queue.Retry, After: after, Detail: fmt.Sprintf("in %v (attempt %d of %d)", after, row.Attempt, row.MaxAttempts)}
}
