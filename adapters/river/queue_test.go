package twiceriver_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twiceriver "github.com/runtwice/twice/adapters/river"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/internal/pgserver"
)

// addArgs asks for points to be added; RequestedAt is stamped by the
// producer on every call, as a producer that retries stamps it again.
type addArgs struct {
	Account     int64     `json:"account"`
	RequestedAt time.Time `json:"requested_at"`
}

func (addArgs) Kind() string { return "twice_add_points" }

// addUniqueArgs is addArgs with River's unique tag on the account only,
// so ByArgs ignores the timestamp.
type addUniqueArgs struct {
	Account     int64     `json:"account" river:"unique"`
	RequestedAt time.Time `json:"requested_at"`
}

func (addUniqueArgs) Kind() string { return "twice_add_points_unique" }

type addWorker[T river.JobArgs] struct {
	river.WorkerDefaults[T]
	pool *pgxpool.Pool
}

func (w *addWorker[T]) Work(ctx context.Context, _ *river.Job[T]) error {
	_, err := w.pool.Exec(ctx, `UPDATE accounts SET points = points + 5 WHERE id = 7`)
	return err
}

func addJob[T river.JobArgs](name string, build func(int, time.Time) T) harness.Job {
	return twiceriver.Job(name, build(1, time.Time{}),
		func(d *harness.Delivery) river.Worker[T] { return &addWorker[T]{pool: d.DB} },
		twiceriver.InsertOpts(&river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}),
		twiceriver.ArgsPerEnqueue(build))
}

// A producer that stamps its args per call defeats UniqueOpts{ByArgs:
// true}: River's unique key covers the timestamp, so the retried insert is
// a new job and the points are added twice. With River's unique tag on
// the account alone, the copy is refused.
func TestByArgsWithPerCallTimestampUnderProducerRetry(t *testing.T) {
	c := accounts
	c.Faults = []faults.Fault{faults.ProducerRetry()}
	// The producer's clock moves between its calls: n milliseconds on.
	stamped := func(n int, now time.Time) addArgs {
		return addArgs{Account: 7, RequestedAt: now.Add(time.Duration(n) * time.Millisecond)}
	}
	res, err := harness.Run(t.Context(), addJob("add-stamped", stamped), c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	require.False(t, res.Idempotent(), "the copy with a later RequestedAt is not River's duplicate: %s", res)
	require.Len(t, res.Scenarios[0].Deliveries, 2)
	assert.Empty(t, res.Scenarios[0].Deliveries[1].NotDelivered, "the copy is delivered")

	tagged := func(n int, now time.Time) addUniqueArgs {
		return addUniqueArgs{Account: 7, RequestedAt: now.Add(time.Duration(n) * time.Millisecond)}
	}
	res, err = harness.Run(t.Context(), addJob("add-tagged", tagged), c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	assert.True(t, res.Idempotent(), "unique on the account alone refuses the copy: %s", res)
	assert.Contains(t, res.Scenarios[0].Deliveries[1].NotDelivered, "duplicate")
}

// ArgsPerEnqueue must build the job's own args type.
func TestArgsPerEnqueueOfAnotherTypeIsAnError(t *testing.T) {
	_, err := harness.Run(t.Context(), twiceriver.Job("set", setArgs{Account: 7},
		func(d *harness.Delivery) river.Worker[setArgs] { return &setWorker{pool: d.DB} },
		twiceriver.ArgsPerEnqueue(func(int, time.Time) addArgs { return addArgs{} })), accounts)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ArgsPerEnqueue builds twiceriver_test.addArgs, but the job's args are twiceriver_test.setArgs")
}

// With the production client's workers bundle, the job's own kind is
// checked as River's client checks it at insert.
func TestWorkersCheckTheJobsOwnKind(t *testing.T) {
	other := river.NewWorkers()
	river.AddWorker(other, &addWorker[addArgs]{})
	_, err := harness.Run(t.Context(), twiceriver.Job("set", setArgs{Account: 7},
		func(d *harness.Delivery) river.Worker[setArgs] { return &setWorker{pool: d.DB} },
		twiceriver.Workers(other)), accounts)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `has no worker for the job's own kind "twice_set_points"`)

	both := river.NewWorkers()
	river.AddWorker(both, &setWorker{})
	c := accounts
	c.Faults = []faults.Fault{faults.RunTwice()}
	res, err := harness.Run(t.Context(), twiceriver.Job("set", setArgs{Account: 7},
		func(d *harness.Delivery) river.Worker[setArgs] { return &setWorker{pool: d.DB} },
		twiceriver.Workers(both)), c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	assert.True(t, res.Idempotent(), "%s", res)
}

// Rules.Dedup follows UniqueOpts: ByPeriod, else while the original is in
// River's unique states, else none.
func TestRulesDedupFollowsUniqueOpts(t *testing.T) {
	for _, tc := range []struct {
		opts *river.InsertOpts
		want func(time.Duration) bool
		say  string
	}{
		{nil, func(d time.Duration) bool { return d == 0 }, "no insert options: no dedup"},
		{&river.InsertOpts{Queue: "q"}, func(d time.Duration) bool { return d == 0 }, "not unique: no dedup"},
		{&river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}, func(d time.Duration) bool { return d < 0 }, "ByArgs: while in the unique states"},
		{&river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: 15 * time.Minute}}, func(d time.Duration) bool { return d == 15*time.Minute }, "ByPeriod: the period"},
	} {
		job := twiceriver.Job("set", setArgs{Account: 7},
			func(d *harness.Delivery) river.Worker[setArgs] { return &setWorker{pool: d.DB} },
			twiceriver.InsertOpts(tc.opts))
		got := job.Queue.Rules().Dedup
		assert.True(t, tc.want(got), "%s: Dedup %v", tc.say, got)
	}
}

// riverDB is a fresh database with River's schema, as the harness makes
// one, and the harness's own connection to it.
func riverDB(t *testing.T, q queue.Queue) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	srv, err := pgserver.Shared(ctx)
	require.NoError(t, err)
	admin, err := pgx.Connect(ctx, srv.ConnString(""))
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	name := fmt.Sprintf("twiceriver_queue_%d_%d", os.Getpid(), time.Now().UnixNano())
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, srv.ConnString(name))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close(context.Background())
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	require.NoError(t, q.Schema().Apply(ctx, conn))
	return conn
}

// A job inserted with ScheduledAt, or snoozed, is not handed out before
// it is due: Fetch says when it is (Fetched.DueAt), and hands it out
// there.
func TestScheduledAndSnoozedJobsAnswerDueAt(t *testing.T) {
	start := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	due := start.Add(10 * time.Second)
	q := twiceriver.Job("set-scheduled", setArgs{Account: 7},
		func(d *harness.Delivery) river.Worker[setArgs] { return &setWorker{pool: d.DB} },
		twiceriver.InsertOpts(&river.InsertOpts{ScheduledAt: due})).Queue
	conn := riverDB(t, q)
	ctx := t.Context()

	enq, err := q.Enqueue(ctx, queue.Op{Conn: conn, Now: start, Job: 1})
	require.NoError(t, err)
	f, err := q.Fetch(ctx, queue.Op{Conn: conn, Now: start, Job: 1, JobID: enq.JobID, Kind: queue.DeliveryFirst})
	require.NoError(t, err)
	assert.False(t, f.Delivered)
	assert.False(t, f.Done)
	assert.True(t, due.Equal(f.DueAt), "DueAt %v, want %v", f.DueAt, due)
	assert.Contains(t, f.Reason, "scheduled until 10s")

	f, err = q.Fetch(ctx, queue.Op{Conn: conn, Now: due, Job: 1, JobID: enq.JobID, Kind: queue.DeliveryFirst})
	require.NoError(t, err)
	require.True(t, f.Delivered, "due at %v: %s", due, f.Reason)
	assert.True(t, f.DueAt.IsZero())

	s, err := q.Nack(ctx, queue.Op{Conn: conn, Now: due, Job: 1, JobID: enq.JobID, Kind: queue.DeliveryFirst, Queued: f.Job}, river.JobSnooze(5*time.Minute))
	require.NoError(t, err)
	assert.Equal(t, queue.Snoozed, s.Outcome)
	f, err = q.Fetch(ctx, queue.Op{Conn: conn, Now: due, Job: 1, JobID: enq.JobID, Kind: queue.DeliveryRetry})
	require.NoError(t, err)
	assert.False(t, f.Delivered)
	assert.True(t, due.Add(5*time.Minute).Equal(f.DueAt), "snoozed until %v", f.DueAt)
}

// River's unique states include completed, so a producer's call that
// comes after the job completed is refused as a duplicate: the default
// matrix has that late copy for a unique job, and it passes, the copy
// not delivered. A job that is not unique has no late copy in its matrix.
func TestLateCopyAfterCompletionIsRefused(t *testing.T) {
	c := accounts
	c.Faults = []faults.Fault{faults.LateProducerRetry()}
	stable := func(int, time.Time) addUniqueArgs { return addUniqueArgs{Account: 7} }
	res, err := harness.Run(t.Context(), addJob("add-late", stable), c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	require.Len(t, res.Scenarios, 1)
	s := res.Scenarios[0]
	assert.True(t, res.Idempotent(), "River refuses the late copy of a completed unique job: %s", res)
	require.Len(t, s.Deliveries, 2)
	assert.Contains(t, s.Deliveries[1].NotDelivered, "duplicate", "%s", s.Schedule)

	late := func(res *harness.Result) int {
		n := 0
		for _, s := range res.Scenarios {
			if s.Fault == faults.NameLateProducerRetry {
				n++
			}
		}
		return n
	}
	matrix := accounts
	matrix.Faults = nil // the default matrix
	res, err = harness.Run(t.Context(), addJob("add-late", stable), matrix)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	assert.Positive(t, late(res), "the default matrix of a unique job has a late copy: %s", res)

	res, err = harness.Run(t.Context(), twiceriver.Job("set", setArgs{Account: 7},
		func(d *harness.Delivery) river.Worker[setArgs] { return &setWorker{pool: d.DB} }), matrix)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	assert.Zero(t, late(res), "a job that is not unique gets no late copy by default")
}

// roundTrips counts what a connection sends the server: each query and
// each batch (one pipeline) is one round trip once its statements are
// prepared; calls lists them, a batch as its statements joined by " + ".
type roundTrips struct {
	calls []string
	batch []string
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	r.calls = append(r.calls, statementName(data.SQL))
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.batch = nil
	return ctx
}

func (r *roundTrips) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	r.batch = append(r.batch, statementName(data.SQL))
}

func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {
	r.calls = append(r.calls, strings.Join(r.batch, " + "))
}

func (r *roundTrips) take() []string {
	out := r.calls
	r.calls = nil
	return out
}

// statementName is River's sqlc name of a statement ("JobGetByID"), or
// its first word.
func statementName(sql string) string {
	if _, after, ok := strings.Cut(sql, "-- name: "); ok {
		return strings.Fields(after)[0]
	}
	return strings.Fields(sql)[0]
}

// Fetch costs the queue's connection River's own statements only: the
// producer's lock and River's JobGetTx in one round trip; River's
// rescuer (JobGetStuck) only when the job is running, and no transaction
// around them, as River runs them each on its own on its pool.
func TestFetchRoundTrips(t *testing.T) {
	start := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	q := twiceriver.Job("set-trips", setArgs{Account: 7},
		func(d *harness.Delivery) river.Worker[setArgs] { return &setWorker{pool: d.DB} }).Queue
	cfg, err := pgx.ParseConfig(riverDB(t, q).Config().ConnString())
	require.NoError(t, err)
	trips := &roundTrips{}
	cfg.Tracer = trips
	ctx := t.Context()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	op := func(now time.Time, kind queue.DeliveryKind, jobID string) queue.Op {
		return queue.Op{Conn: conn, Now: now, Job: 1, JobID: jobID, Kind: kind}
	}

	enq, err := q.Enqueue(ctx, op(start, queue.DeliveryFirst, ""))
	require.NoError(t, err)
	trips.take() // River's insert, and its notify once per queue and cooldown

	f, err := q.Fetch(ctx, op(start, queue.DeliveryFirst, enq.JobID))
	require.NoError(t, err)
	require.True(t, f.Delivered, f.Reason)
	assert.Equal(t, []string{"UPDATE + JobGetByID"}, trips.take(), "an available job")

	f, err = q.Fetch(ctx, op(start.Add(time.Minute), queue.DeliveryRedelivery, enq.JobID))
	require.NoError(t, err)
	assert.False(t, f.Delivered)
	assert.Contains(t, f.Reason, "is running")
	assert.Equal(t, []string{"UPDATE + JobGetByID", "JobGetStuck"}, trips.take(), "a running job River's rescuer leaves")

	f, err = q.Fetch(ctx, op(start.Add(2*time.Hour), queue.DeliveryRedelivery, enq.JobID))
	require.NoError(t, err)
	require.True(t, f.Delivered, "rescued after RescueAfter and due a second later: %s", f.Reason)
	assert.Equal(t, []string{"UPDATE + JobGetByID", "JobGetStuck", "JobRescueMany", "UPDATE + JobGetByID"}, trips.take(), "a job River's rescuer rescues")

	_, err = q.Ack(ctx, queue.Op{Conn: conn, Now: start.Add(2 * time.Hour), Job: 1, JobID: enq.JobID, Kind: queue.DeliveryRedelivery, Queued: f.Job})
	require.NoError(t, err)
	assert.Equal(t, []string{"JobSetStateIfRunningMany"}, trips.take())
	f, err = q.Fetch(ctx, op(start.Add(3*time.Hour), queue.DeliveryRedelivery, enq.JobID))
	require.NoError(t, err)
	assert.True(t, f.Done, f.Reason)
	assert.Equal(t, []string{"UPDATE + JobGetByID"}, trips.take(), "a completed job")
}

func setJobProducedBy(produce func(context.Context, twiceriver.Producing) error, opts ...twiceriver.Option) harness.Job {
	return twiceriver.Job("set", setArgs{Account: 7},
		func(d *harness.Delivery) river.Worker[setArgs] { return &setWorker{pool: d.DB} },
		append(opts, twiceriver.Producer(produce))...)
}

// The producer's code is run for each insert; what it gets wrong is
// said, naming the insert.
func TestProducerMisuse(t *testing.T) {
	insert := func(ctx context.Context, p twiceriver.Producing) error {
		_, err := p.Client.InsertTx(ctx, p.Tx, setArgs{Account: 7}, nil)
		return err
	}
	for _, tt := range []struct {
		name string
		job  harness.Job
		want string
	}{
		{"nothing inserted", setJobProducedBy(func(context.Context, twiceriver.Producing) error { return nil }),
			`twiceriver: job "set": the producer's code (twiceriver.Producer), insert 1 inserted no job of kind "twice_set_points"`},
		{"an error", setJobProducedBy(func(context.Context, twiceriver.Producing) error { return fmt.Errorf("the API is down") }),
			`twiceriver: job "set": the producer's code (twiceriver.Producer), insert 1 returned: the API is down`},
		{"a panic", setJobProducedBy(func(context.Context, twiceriver.Producing) error { panic("boom") }),
			`insert 1 returned: panicked: boom`},
		{"two jobs", setJobProducedBy(func(ctx context.Context, p twiceriver.Producing) error {
			if err := insert(ctx, p); err != nil {
				return err
			}
			return insert(ctx, p)
		}), `inserted 2 jobs of kind "twice_set_points" in one call`},
		{"with ArgsPerEnqueue", setJobProducedBy(insert, twiceriver.ArgsPerEnqueue(func(int, time.Time) setArgs { return setArgs{} })),
			"both ArgsPerEnqueue and Producer say how the job is inserted"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, err := harness.Run(t.Context(), tt.job, accounts)
			if res != nil {
				t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// The producer's code may insert through its own transaction on
// Producing.DB, or with Insert on the client's pool; a retry that
// inserts nothing was refused by the producer itself.
func TestProducerOwnTransactionAndItsOwnDedup(t *testing.T) {
	own := setJobProducedBy(func(ctx context.Context, p twiceriver.Producing) error {
		return pgx.BeginFunc(ctx, p.DB, func(tx pgx.Tx) error {
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'twice_set_points'`).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil // already asked for
			}
			_, err := p.Client.InsertTx(ctx, tx, setArgs{Account: 7}, nil)
			return err
		})
	})
	res, err := harness.Run(t.Context(), own, accounts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	assert.True(t, res.Idempotent(), "%s", res)
	var copies int
	for _, sc := range res.Scenarios {
		if sc.Fault == faults.NameProducerRetry {
			copies++
			assert.Contains(t, sc.Deliveries[1].NotDelivered, `the producer's code inserted no job of kind "twice_set_points" on its retry`)
		}
	}
	assert.Equal(t, 1, copies)

	pooled := setJobProducedBy(func(ctx context.Context, p twiceriver.Producing) error {
		_, err := p.Client.Insert(ctx, setArgs{Account: 7}, nil)
		return err
	})
	res, err = harness.Run(t.Context(), pooled, accounts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	assert.True(t, res.Idempotent(), "setting is idempotent, and each copy is delivered: %s", res)
}
