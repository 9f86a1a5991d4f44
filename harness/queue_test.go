package harness_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/harness/result"
)

// tableQueue is a small queue kept in a table, as Postgres-backed queues
// are: a job row with a state, an attempt counter and a time it is due.
// It hands a running job out again only after redeliver, reads errSnooze
// as a snooze and discards a job after maxAttempts.
type tableQueue struct {
	redeliver   time.Duration
	cancelAfter time.Duration
	maxAttempts int
	unique      bool          // a producer's copy is a duplicate
	holdRunning bool          // a running job is not handed out before redeliver
	oneAtATime  bool          // queue.Rules.OneScenarioAtATime
	oneDelivery bool          // queue.Rules.OneDeliveryAtATime, whether it holds or not
	runIn       time.Duration // a job is due this long after its enqueue
	answerDue   bool          // a job not yet due is answered with its DueAt
	postpone    bool          // a job is never due: each Fetch puts it 10s ahead
	settles     bool          // queue.Rules.HandlerSettles
}

// tableQueueSchema is the queue's own: it carries it (Schema), and the
// harness applies it before the job's setup.
const tableQueueSchema = `
CREATE TABLE queue_jobs (
	id         bigserial PRIMARY KEY,
	state      text NOT NULL DEFAULT 'available',
	attempt    int NOT NULL DEFAULT 0,
	run_at     timestamptz NOT NULL,
	started_at timestamptz,
	note       text
);
CREATE TABLE queue_meta (k text PRIMARY KEY);
`

// rewardsSchema is the job's own table.
const rewardsSchema = `
CREATE TABLE rewards (order_id int PRIMARY KEY, points int NOT NULL);
INSERT INTO rewards VALUES (1, 0);
`

func (q tableQueue) Schema() queue.Schema {
	return queue.Schema{Name: "tableQueue", SQL: tableQueueSchema}
}

var errSnooze = errors.New("snooze for a minute")

func (q tableQueue) Enqueue(ctx context.Context, op queue.Op) (queue.Enqueued, error) {
	if q.unique && op.Job > 1 {
		return queue.Enqueued{Duplicate: true, Reason: "one job per order"}, nil
	}
	var id int64
	err := op.Conn.QueryRow(ctx, `INSERT INTO queue_jobs (run_at) VALUES ($1) RETURNING id`, op.Now.Add(q.runIn)).Scan(&id)
	return queue.Enqueued{JobID: fmt.Sprint(id)}, err
}

func (q tableQueue) Fetch(ctx context.Context, op queue.Op) (queue.Fetched, error) {
	if q.postpone {
		due := op.Now.Add(10 * time.Second)
		return queue.Fetched{Reason: "postponed to " + due.Format(time.RFC3339), DueAt: due}, nil
	}
	var attempt int
	err := op.Conn.QueryRow(ctx, `
		UPDATE queue_jobs SET state = 'running', attempt = attempt + 1, started_at = $2
		WHERE id = $1 AND run_at <= $2 AND (state = 'available'
			OR (state = 'running' AND (NOT $4 OR started_at <= $2::timestamptz - $3::interval)))
		RETURNING attempt`, op.JobID, op.Now, q.redeliver, q.holdRunning).Scan(&attempt)
	if errors.Is(err, pgx.ErrNoRows) {
		var state string
		var runAt time.Time
		if err := op.Conn.QueryRow(ctx, `SELECT state, run_at FROM queue_jobs WHERE id = $1`, op.JobID).Scan(&state, &runAt); err != nil {
			return queue.Fetched{}, err
		}
		if state == "available" && runAt.After(op.Now) {
			f := queue.Fetched{Reason: "the job is scheduled for " + runAt.UTC().Format(time.RFC3339)}
			if q.answerDue {
				f.DueAt = runAt
			}
			return f, nil
		}
		return queue.Fetched{Reason: "the job is " + state, Done: state == "done"}, nil
	}
	return queue.Fetched{Delivered: true, Attempt: attempt, Job: attempt}, err
}

func (q tableQueue) Ack(ctx context.Context, op queue.Op) (queue.Settled, error) {
	_, err := op.Conn.Exec(ctx, `UPDATE queue_jobs SET state = 'done', note = 'acked' WHERE id = $1`, op.JobID)
	return queue.Settled{Outcome: queue.Completed}, err
}

func (q tableQueue) Nack(ctx context.Context, op queue.Op, err error) (queue.Settled, error) {
	switch {
	case errors.Is(err, errSnooze):
		_, err := op.Conn.Exec(ctx, `UPDATE queue_jobs SET state = 'available', run_at = $2::timestamptz + interval '1 minute' WHERE id = $1`, op.JobID, op.Now)
		return queue.Settled{Outcome: queue.Snoozed, After: time.Minute}, err
	case q.maxAttempts > 0 && op.Queued.(int) >= q.maxAttempts:
		_, err := op.Conn.Exec(ctx, `UPDATE queue_jobs SET state = 'discarded' WHERE id = $1`, op.JobID)
		return queue.Settled{Outcome: queue.Discarded, Detail: fmt.Sprintf("after %d attempts", q.maxAttempts)}, err
	}
	_, err = op.Conn.Exec(ctx, `UPDATE queue_jobs SET state = 'available' WHERE id = $1`, op.JobID)
	return queue.Settled{Outcome: queue.Retry, After: time.Second}, err
}

func (q tableQueue) Rules() queue.Rules {
	return queue.Rules{Redeliver: q.redeliver, CancelAfter: q.cancelAfter, Tables: []string{"queue_meta"}, JobTable: "queue_jobs", JobIDColumn: "id", OneScenarioAtATime: q.oneAtATime, OneDeliveryAtATime: q.oneDelivery,
		HandlerSettles: q.settles}
}

func queueConfig(fs ...faults.Fault) harness.Config {
	return harness.Config{Setup: []harness.Setup{harness.SQL(rewardsSchema)}, Faults: fs}
}

func runQueue(t *testing.T, job harness.Job, cfg harness.Config) *harness.Result {
	t.Helper()
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	return res
}

// The queue's bookkeeping is not the handler's steps, and its rows are
// not compared: a handler that writes idempotently passes the matrix.
func TestQueueBookkeepingIsNotSteps(t *testing.T) {
	job := harness.Job{Name: "set-points", Queue: tableQueue{redeliver: time.Hour, holdRunning: true},
		Handler: exec(`UPDATE rewards SET points = 50 WHERE order_id = 1`)}
	res := runQueue(t, job, queueConfig())
	assert.True(t, res.Idempotent(), "%s", res)
	require.Len(t, res.Steps, 1, "only the handler's UPDATE is a step")
	for _, s := range res.Scenarios {
		if s.Fault == faults.NameCrashBeforeAck {
			require.Len(t, s.Deliveries, 2)
			assert.Equal(t, queue.DeliveryRedelivery, s.Deliveries[1].Kind)
			assert.Equal(t, time.Hour, s.Schedule.Deliveries[1].Advance, "the queue's redelivery time replaces the visibility timeout")
		}
	}
}

// A queue whose handlers settle with it themselves (a Kafka handler that
// commits its offset) has each fetch or ack made while another
// delivery's handler runs recorded as a race: what it reads hangs on
// whether that handler has settled yet, so a scenario that passed with
// one runs again. A queue that settles deliveries itself records none.
func TestQueueHandlerSettlesRaces(t *testing.T) {
	for _, settles := range []bool{false, true} {
		t.Run(fmt.Sprintf("settles=%v", settles), func(t *testing.T) {
			job := harness.Job{Name: "set-points", Queue: tableQueue{redeliver: time.Hour, settles: settles},
				Handler: exec(`UPDATE rewards SET points = 50 WHERE order_id = 1`)}
			res := runQueue(t, job, queueConfig(faults.ConcurrentDelivery()))
			assert.True(t, res.Idempotent(), "%s", res)
			var beside []result.Race
			for _, sc := range res.Scenarios {
				for _, r := range sc.Races {
					if r.Kind == result.SettledBeside {
						beside = append(beside, r)
						assert.NotNil(t, sc.Rerun, "schedule %s passed with a race and was not run again", sc.Schedule)
					}
				}
			}
			if !settles {
				assert.Empty(t, beside)
				return
			}
			assert.Contains(t, beside, result.Race{Kind: result.SettledBeside, Delivery: 2, Other: 1},
				"the second delivery is handed out while the first handler runs")
		})
	}
}

// A delivery the queue refuses is "not delivered": no handler ran, and
// the job is not counted as handled by it.
func TestQueueNotDelivered(t *testing.T) {
	job := harness.Job{Name: "add-points", Queue: tableQueue{redeliver: time.Hour, holdRunning: true, unique: true},
		Handler: exec(`UPDATE rewards SET points = points + 50 WHERE order_id = 1`)}
	res := runQueue(t, job, queueConfig(faults.ConcurrentDelivery(), faults.ProducerRetry()))
	assert.True(t, res.Idempotent(), "a running job and a duplicate copy are never handed out: %s", res)
	var running, duplicate int
	for _, s := range res.Scenarios {
		for _, d := range s.Deliveries {
			switch {
			case strings.Contains(d.NotDelivered, "the job is running"):
				running++
				assert.Empty(t, d.Steps)
			case strings.Contains(d.NotDelivered, "duplicate: one job per order"):
				duplicate++
			}
		}
	}
	assert.Positive(t, running, "concurrent deliveries of a running job")
	assert.Equal(t, 1, duplicate, "the producer's copy")
}

// A handler that snoozes is handed out again after the snooze: not a
// failure, not a finding, also on the clean run.
func TestQueueSnoozeIsNotAFailure(t *testing.T) {
	job := harness.Job{Name: "snoozer", Queue: tableQueue{redeliver: time.Hour, holdRunning: true},
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			if d.Attempt == 1 {
				return errSnooze
			}
			_, err := d.DB.Exec(ctx, `UPDATE rewards SET points = 50 WHERE order_id = 1`)
			return err
		}}
	res := runQueue(t, job, queueConfig(faults.RunTwice(), faults.CrashBeforeAck()))
	assert.True(t, res.Idempotent(), "%s", res)
	var snoozed bool
	for _, s := range res.Scenarios {
		for _, d := range s.Deliveries {
			snoozed = snoozed || d.Settled == "snoozed"
		}
	}
	assert.True(t, snoozed)
}

// A job the queue discards did not complete, and the finding says the
// queue discarded it.
func TestQueueDiscardIsIncomplete(t *testing.T) {
	failAgain := func(ctx context.Context, d *harness.Delivery) error {
		if _, err := d.DB.Exec(ctx, `UPDATE rewards SET points = 50 WHERE order_id = 1`); err != nil {
			return err
		}
		if d.Kind != queue.DeliveryFirst {
			return errors.New("the order is gone")
		}
		return nil
	}
	job := harness.Job{Name: "discarded", Queue: tableQueue{redeliver: time.Hour, holdRunning: true, maxAttempts: 2}, Handler: failAgain}
	res := runQueue(t, job, queueConfig(faults.CrashBeforeAck()))
	require.False(t, res.Idempotent())
	var problems []string
	for _, p := range res.Scenarios[0].Problems {
		problems = append(problems, p.Detail)
	}
	assert.Contains(t, strings.Join(problems, "\n"), "the queue discarded it (after 2 attempts)")
}

// An ack that may wait on a lock a running delivery holds does not stop
// the scenario: the server says it waits, and the other delivery goes on.
func TestQueueAckWaitsOnLock(t *testing.T) {
	job := harness.Job{Name: "second-attempt-locks-its-row", Queue: tableQueue{redeliver: time.Hour},
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
				if d.Attempt == 2 {
					if _, err := tx.Exec(ctx, `UPDATE queue_jobs SET note = 'worked' WHERE id = $1`, d.JobID); err != nil {
						return err
					}
				}
				_, err := tx.Exec(ctx, `UPDATE rewards SET points = 50 WHERE order_id = 1`)
				return err
			})
		}}
	// Delivery 2 locks the job's row; delivery 1 commits and returns, and
	// its ack waits on that lock until delivery 2 commits.
	sched, err := faults.Parse("j1a1w1 > j1a2w2@1:0 order 1,2,2,1,1,2,2")
	require.NoError(t, err)
	res := runQueue(t, job, queueConfig(faults.Replay(sched)))
	require.Len(t, res.Scenarios, 1)
	s := res.Scenarios[0]
	for _, d := range s.Deliveries {
		assert.Empty(t, d.Err)
		assert.Equal(t, "completed", d.Settled)
	}
	assert.Equal(t, []int{1, 2, 2, 1, 1, 2, 2}, s.Order)
	// Whether delivery 2 still holds the row when delivery 1's ack runs
	// is timing: its remaining steps may be granted while delivery 1's
	// handler returns. Either way the scenario must end, both acked.
}

// The queue cancels a delivery that runs past CancelAfter before it hands
// the job out again; a handler that honours its context stops there and
// no second attempt overlaps it.
func TestQueueCancelsBeforeRedelivery(t *testing.T) {
	job := harness.Job{Name: "two-steps", Queue: tableQueue{redeliver: time.Hour, cancelAfter: time.Minute, holdRunning: true},
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `UPDATE rewards SET points = points + 25 WHERE order_id = 1`); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `UPDATE rewards SET points = points + 25 WHERE order_id = 1`)
				return err
			})
		}}
	res := runQueue(t, job, queueConfig(faults.VisibilityTimeout()))
	assert.True(t, res.Idempotent(), "%s", res)
	for _, s := range res.Scenarios {
		d1 := s.Deliveries[0]
		if s.Schedule.Deliveries[1].After < len(res.Steps) {
			assert.Contains(t, d1.Fault, "context cancelled by the queue 1m0s after it started", s.Schedule.String())
			assert.Contains(t, d1.Err, "context canceled", s.Schedule.String())
		} else {
			// It had committed: it returns nil and is acked, and the
			// job is not handed out again.
			assert.Empty(t, d1.Fault, s.Schedule.String())
			assert.Contains(t, s.Deliveries[1].NotDelivered, "the job is done", s.Schedule.String())
		}
	}
}

// queue.Model's CancelAtVisibilityTimeout cancels the first
// delivery when the visibility timeout passes, before the redelivery: a
// handler that honours its context rolls back there, and only the
// redelivery's work stays. Off, the first delivery runs on beside the
// redelivery and the job pays twice. Either way, once the first delivery
// had committed there is nothing left to cancel.
func TestCancelAtVisibilityTimeout(t *testing.T) {
	handler := func(ctx context.Context, d *harness.Delivery) error {
		return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `UPDATE rewards SET points = points + 25 WHERE order_id = 1`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE rewards SET points = points + 25 WHERE order_id = 1`)
			return err
		})
	}
	for _, cancel := range []bool{true, false} {
		t.Run(fmt.Sprintf("cancel=%v", cancel), func(t *testing.T) {
			job := harness.Job{Name: "two-steps", Handler: handler, Queue: queue.Model{CancelAtVisibilityTimeout: cancel}}
			cfg := harness.Config{
				Setup:  []harness.Setup{harness.SQL(rewardsSchema)},
				Faults: []faults.Fault{faults.VisibilityTimeout()},
			}
			res, err := harness.Run(t.Context(), job, cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
			require.NotEmpty(t, res.Scenarios)
			for _, s := range res.Scenarios {
				d1 := s.Deliveries[0]
				committed := s.Schedule.Deliveries[1].After >= len(res.Steps)
				switch {
				case committed:
					assert.Empty(t, d1.Fault, s.Schedule.String())
					assert.Equal(t, result.NotIdempotent, s.Verdict, "%s: both deliveries committed", s.Schedule)
				case cancel:
					assert.Contains(t, d1.Fault, "context cancelled at the visibility timeout, 30s after it started", s.Schedule.String())
					assert.Contains(t, d1.Err, "context canceled", s.Schedule.String())
					assert.Equal(t, result.Idempotent, s.Verdict, "%s: the first delivery rolled back", s.Schedule)
				default:
					assert.Empty(t, d1.Fault, s.Schedule.String())
					assert.Equal(t, result.NotIdempotent, s.Verdict, "%s: the first delivery ran on", s.Schedule)
				}
			}
		})
	}
}

// A queue that asks for it has its scenarios and clean runs run one at a
// time, whatever -twice.parallel says: no two deliveries of a check whose
// faults never overlap them run at once. A delivery that died is not
// running, though its handler's goroutine may still be unwinding (a
// crashed worker's would be gone): the harness cancelled its context
// before the next delivery started, so only live contexts count.
func TestQueueOneScenarioAtATime(t *testing.T) {
	var mu sync.Mutex
	live := map[context.Context]bool{}
	most := 0
	job := harness.Job{Name: "serial", Queue: tableQueue{oneAtATime: true},
		Handler: func(ctx context.Context, d *harness.Delivery) error {
			mu.Lock()
			live[ctx] = true
			n := 0
			for c := range live {
				if c.Err() == nil {
					n++
				}
			}
			most = max(most, n)
			mu.Unlock()
			defer func() {
				mu.Lock()
				delete(live, ctx)
				mu.Unlock()
			}()
			_, err := d.DB.Exec(ctx, `UPDATE rewards SET points = points + 25 WHERE order_id = 1`)
			return err
		}}
	cfg := queueConfig(faults.RunTwice(), faults.ProducerRetry(), faults.CrashBeforeAck(), faults.LostAck(), faults.CrashAtEveryStep())
	t.Setenv(harness.ParallelEnv, "4")
	res := runQueue(t, job, cfg)
	require.GreaterOrEqual(t, len(res.Scenarios), 5)
	assert.Equal(t, 1, most, "deliveries of the check ran at once")
}

// migratedQueue builds its schema in Go, as River's migrator does: Apply
// runs on the harness's connection to the template, after SQL.
type migratedQueue struct{ tableQueue }

func (q migratedQueue) Schema() queue.Schema {
	return queue.Schema{Name: "migratedQueue", SQL: `CREATE TABLE queue_meta (k text PRIMARY KEY)`,
		Apply: func(ctx context.Context, conn *pgx.Conn) error {
			// Needs the SQL's table: SQL runs first.
			_, err := conn.Exec(ctx, strings.Replace(tableQueueSchema, "CREATE TABLE queue_meta (k text PRIMARY KEY);", "INSERT INTO queue_meta VALUES ('migrated');", 1))
			return err
		}}
}

// A queue carries its schema: the harness applies it before Config.Setup
// (which may use the queue's tables), in Run and Explore alike, so a job
// with its queue needs nothing else.
func TestQueueSchemaBeforeSetup(t *testing.T) {
	for _, q := range []queue.Queue{
		tableQueue{redeliver: time.Hour, holdRunning: true},
		migratedQueue{tableQueue{redeliver: time.Hour, holdRunning: true}},
	} {
		t.Run(fmt.Sprintf("%T", q), func(t *testing.T) {
			job := harness.Job{Name: "set-points", Queue: q,
				Handler: exec(`UPDATE rewards SET points = (SELECT count(*) FROM queue_meta) WHERE order_id = 1`)}
			cfg := queueConfig(faults.RunTwice(), faults.CrashBeforeAck(), faults.CrashAtEveryStep())
			cfg.Setup = append(cfg.Setup, harness.SQL(`INSERT INTO queue_meta VALUES ('the job''s setup')`))
			res := runQueue(t, job, cfg)
			assert.True(t, res.Idempotent(), "%s", res)
			want := 1
			if _, ok := q.(migratedQueue); ok {
				want = 2
			}
			var points []any
			for _, tb := range res.Reference.Tables {
				if tb.Name == "rewards" {
					for _, row := range tb.Rows {
						points = append(points, row[1])
					}
				}
			}
			assert.Equal(t, []any{int64(want)}, points, "queue_meta's rows, counted into rewards")

			cfg.Faults = nil // exploration draws its own schedules
			x := harness.Explore(t, job, cfg, harness.ExploreOptions{Checks: 5, Dir: t.TempDir()})
			assert.False(t, x.Failed(), "%+v", x)
			assert.Positive(t, x.Executed, "Explore ran no schedule")
		})
	}
}

// brokenSchemaQueue's schema fails, or cannot key a template.
type brokenSchemaQueue struct {
	tableQueue
	schema queue.Schema
}

func (q brokenSchemaQueue) Schema() queue.Schema { return q.schema }

// rulesQueue states rules of its own.
type rulesQueue struct {
	tableQueue
	rules queue.Rules
}

func (q rulesQueue) Rules() queue.Rules { return q.rules }

// A queue whose schema or rules cannot be used fails the check at once
// with what to change, as does a model with a negative timeout.
func TestQueueMisuse(t *testing.T) {
	for _, tt := range []struct {
		name  string
		queue queue.Queue
		want  string
	}{
		{"schema SQL fails", brokenSchemaQueue{schema: queue.Schema{Name: "broken", SQL: `CREATE TABLE queue_jobs (id bigserial PRIMARY KEY, oops)`}},
			`setup step failed: queue schema SQL: broken:1:56: ERROR: syntax error`},
		{"Apply fails", brokenSchemaQueue{schema: queue.Schema{Name: "failing", Apply: func(context.Context, *pgx.Conn) error { return errors.New("no migrations") }}},
			`setup step queue schema: failing failed: no migrations`},
		{"Apply without a name", brokenSchemaQueue{schema: queue.Schema{Apply: func(context.Context, *pgx.Conn) error { return nil }}},
			`its queue harness_test.brokenSchemaQueue's Schema has an Apply func but no Name`},
		{"negative Redeliver", rulesQueue{rules: queue.Rules{Redeliver: -time.Second}},
			`its queue harness_test.rulesQueue's Rules.Redeliver is -1s; want zero (30s) or more`},
		{"negative CancelAfter", rulesQueue{rules: queue.Rules{CancelAfter: -time.Second}},
			`Rules.CancelAfter is -1s; want zero (never cancel) or more`},
		{"job table without ID column", rulesQueue{rules: queue.Rules{JobTable: "queue_jobs"}},
			`Rules.JobTable is "queue_jobs" and Rules.JobIDColumn ""; set both or neither`},
		{"negative model timeout", queue.Model{VisibilityTimeout: -time.Minute},
			`queue.Model.VisibilityTimeout is -1m0s; want zero (30s) or more`},
		{"nil model pointer", (*queue.Model)(nil),
			`Job.Queue is a nil *queue.Model; leave Queue nil for the default model`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			job := harness.Job{Name: "misused", Queue: tt.queue, Handler: exec(`SELECT 1`)}
			res, err := harness.Run(t.Context(), job, queueConfig(faults.RunTwice()))
			require.Error(t, err)
			assert.Nil(t, res)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// A job without an adapter has queue.Model's timing: the visibility
// timeout it is given, 30s by default, moves the clock before a
// redelivery.
func TestModelVisibilityTimeout(t *testing.T) {
	for _, tt := range []struct {
		queue queue.Queue
		want  time.Duration
	}{
		{nil, faults.DefaultVisibilityTimeout},
		{queue.Model{}, faults.DefaultVisibilityTimeout},
		{queue.Model{VisibilityTimeout: 5 * time.Minute}, 5 * time.Minute},
		{&queue.Model{VisibilityTimeout: time.Hour}, time.Hour},
	} {
		t.Run(fmt.Sprintf("%#v", tt.queue), func(t *testing.T) {
			job := harness.Job{Name: "set-points", Queue: tt.queue, Handler: exec(`UPDATE rewards SET points = 50 WHERE order_id = 1`)}
			res := runQueue(t, job, queueConfig(faults.CrashBeforeAck()))
			require.Len(t, res.Scenarios, 1)
			s := res.Scenarios[0]
			require.Len(t, s.Schedule.Deliveries, 2)
			assert.Equal(t, tt.want, s.Schedule.Deliveries[1].Advance)
			assert.Empty(t, s.Deliveries[1].Settled, "the harness runs the model itself, with no queue operations")
		})
	}
}

// spiModel is queue.Model behind the Queue interface: the harness does not
// know it as the model and drives its methods like an adapter's.
type spiModel struct{ queue.Model }

// queue.Model's methods are the model the harness runs itself: driven
// through the Queue interface, every scenario gets the same verdict and the
// same deliveries.
func TestModelMethodsAreTheModel(t *testing.T) {
	for _, tt := range []struct {
		name    string
		handler harness.Handler
	}{
		{"idempotent", exec(`UPDATE rewards SET points = 50 WHERE order_id = 1`)},
		{"increment", exec(`UPDATE rewards SET points = points + 50 WHERE order_id = 1`)},
		{"fails once", func(ctx context.Context, d *harness.Delivery) error {
			if _, err := d.DB.Exec(ctx, `UPDATE rewards SET points = points + 50 WHERE order_id = 1`); err != nil {
				return err
			}
			if d.Attempt == 2 {
				return errors.New("the second attempt fails")
			}
			return nil
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			model := queue.Model{VisibilityTimeout: time.Minute}
			cfg := queueConfig(faults.RunTwice(), faults.ProducerRetry(), faults.CrashBeforeAck(), faults.LostAck(), faults.CrashAtEveryStep(), faults.VisibilityTimeout())
			native := runQueue(t, harness.Job{Name: "model", Queue: model, Handler: tt.handler}, cfg)
			driven := runQueue(t, harness.Job{Name: "model", Queue: spiModel{model}, Handler: tt.handler}, cfg)
			require.Len(t, driven.Scenarios, len(native.Scenarios))
			for i, n := range native.Scenarios {
				d := driven.Scenarios[i]
				require.Equal(t, n.Schedule.String(), d.Schedule.String())
				assert.Equal(t, n.Verdict, d.Verdict, "%s", n.Schedule)
				if overlapping(n.Schedule) {
					// Two deliveries that run at once return in either
					// order, and the queue's answer follows the first
					// return it takes: the failed attempt's retry, or the
					// other's completion. The executor does not decide that
					// race yet (issue 38, item 7), so their deliveries may
					// differ by that retry; the verdict may not.
					continue
				}
				require.Len(t, d.Deliveries, len(n.Deliveries), "%s", n.Schedule)
				for j := range n.Deliveries {
					assert.Equal(t, n.Deliveries[j].JobID, d.Deliveries[j].JobID, "%s delivery %d", n.Schedule, j+1)
					assert.Equal(t, n.Deliveries[j].Attempt, d.Deliveries[j].Attempt, "%s delivery %d", n.Schedule, j+1)
					assert.Equal(t, n.Deliveries[j].Err, d.Deliveries[j].Err, "%s delivery %d", n.Schedule, j+1)
				}
			}
		})
	}
}

// overlapping reports whether a delivery of s starts while another runs.
func overlapping(s faults.Schedule) bool {
	return slices.ContainsFunc(s.Deliveries, func(d faults.Scheduled) bool { return d.With != 0 })
}
