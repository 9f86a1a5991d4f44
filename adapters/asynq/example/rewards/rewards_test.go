package rewards_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twiceasynq "github.com/runtwice/twice/adapters/asynq"
	"github.com/runtwice/twice/adapters/asynq/example/rewards"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/harness/result"
)

var cfg = harness.Config{Setup: []harness.Setup{harness.SQL(rewards.Schema)}}

func run(t *testing.T, job harness.Job, c harness.Config) *harness.Result {
	t.Helper()
	res, err := harness.Run(context.Background(), job, c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	return res
}

func reward(d *harness.Delivery) asynq.Handler { return &rewards.RewardHandler{Pool: d.DB} }

func accountsShow(res *harness.Result, points string) bool {
	for _, s := range res.Scenarios {
		for _, d := range s.StateDiff {
			if d.Table == "accounts" && strings.Contains(d.Diff, points) {
				return true
			}
		}
	}
	return false
}

// Only the handler's own statements are steps: asynq's bookkeeping runs
// on the harness's connection.
func TestRewardStepsAreTheHandlersOwn(t *testing.T) {
	res := run(t, twiceasynq.Job("reward", rewards.NewRewardTask(9812), reward), cfg)
	var sqls []string
	for _, s := range res.Steps {
		sqls = append(sqls, strings.ToLower(strings.Fields(s.SQL)[0]))
	}
	assert.Equal(t, []string{"begin", "insert", "update", "commit"}, sqls)
}

// Deduplicating by asynq's task ID makes every redelivery of the task a
// no-op: crashes at every step, lost commit replies, crash before the
// ack, lost ack, lease expiry under a running handler, redrive.
func TestRewardRedeliveriesAreNoOps(t *testing.T) {
	c := cfg
	c.Faults = faults.DefaultWithout(faults.NameProducerRetry, faults.NameConcurrentProducerRetry)
	res := run(t, twiceasynq.Job("reward", rewards.NewRewardTask(9812), reward), c)
	assert.True(t, res.Idempotent(), "%s", res)
	var redelivered, notDelivered bool
	for _, s := range res.Scenarios {
		for _, d := range s.Deliveries {
			if d.Kind == queue.DeliveryRedelivery && d.NotDelivered == "" {
				redelivered = true
				assert.Equal(t, s.Deliveries[0].JobID, d.JobID, "a redelivery carries the task's ID")
			}
			if s.Fault == faults.NameConcurrentDelivery && d.Kind != queue.DeliveryFirst {
				notDelivered = notDelivered || strings.Contains(d.NotDelivered, "lease holds")
			}
		}
	}
	assert.True(t, redelivered, "some scenario redelivers the task")
	assert.True(t, notDelivered, "asynq never hands out a task whose lease holds: %s", res)
}

// Without asynq.TaskID a producer's second enqueue is a new task with a
// new ID: it runs, and since the handler deduplicates by task ID, not by
// order, it awards again (220 points instead of 170).
func TestRewardProducerCopyWithoutTaskID(t *testing.T) {
	c := cfg
	c.Faults = []faults.Fault{faults.ProducerRetry()}
	res := run(t, twiceasynq.Job("reward", rewards.NewRewardTask(9812), reward), c)
	require.False(t, res.Idempotent(), "%s", res)
	assert.True(t, accountsShow(res, "220"), "the accounts diff shows the second award: %s", res)
	s := res.Scenarios[0]
	require.Len(t, s.Deliveries, 2)
	assert.Equal(t, queue.DeliveryProducerCopy, s.Deliveries[1].Kind)
	assert.Empty(t, s.Deliveries[1].NotDelivered)
	assert.NotEqual(t, s.Deliveries[0].JobID, s.Deliveries[1].JobID, "asynq gives the copy a new task ID")
}

// With asynq.TaskID the producer's copy conflicts with the task asynq
// holds (ErrTaskIDConflict): it is never delivered, and the check passes.
func TestRewardProducerCopyWithTaskID(t *testing.T) {
	c := cfg
	c.Faults = []faults.Fault{faults.ProducerRetry(), faults.ConcurrentProducerRetry()}
	for name, task := range map[string]*asynq.Task{
		"NewTask option": rewards.NewRewardTask(9812, asynq.TaskID("reward-order-9812")),
		"Enqueue option": rewards.NewRewardTask(9812),
	} {
		t.Run(name, func(t *testing.T) {
			var opts []twiceasynq.Option
			if name == "Enqueue option" {
				opts = append(opts, twiceasynq.Enqueue(asynq.TaskID("reward-order-9812")))
			}
			res := run(t, twiceasynq.Job("reward", task, reward, opts...), c)
			assert.True(t, res.Idempotent(), "%s", res)
			for _, s := range res.Scenarios {
				require.Len(t, s.Deliveries, 2)
				copied := s.Deliveries[1]
				assert.Equal(t, queue.DeliveryProducerCopy, copied.Kind)
				assert.Contains(t, copied.NotDelivered, asynq.ErrTaskIDConflict.Error())
				assert.Empty(t, copied.Steps)
				assert.Equal(t, "reward-order-9812", s.Deliveries[0].JobID)
			}
		})
	}
}

// With asynq.Unique the copy finds the uniqueness lock held by the first
// task (ErrDuplicateTask), even for an unguarded handler.
func TestLedgerProducerCopyWithUnique(t *testing.T) {
	c := cfg
	c.Faults = []faults.Fault{faults.ProducerRetry()}
	res := run(t, twiceasynq.Job("ledger", rewards.NewRewardTask(9812), func(d *harness.Delivery) asynq.Handler {
		return &rewards.LedgerHandler{Pool: d.DB}
	}, twiceasynq.Enqueue(asynq.Unique(time.Hour))), c)
	assert.True(t, res.Idempotent(), "%s", res)
	for _, s := range res.Scenarios {
		require.Len(t, s.Deliveries, 2)
		assert.Contains(t, s.Deliveries[1].NotDelivered, asynq.ErrDuplicateTask.Error())
	}
}

// An autocommit write with no guard is written again when the worker
// dies after the handler returned and before asynq recorded it.
func TestLedgerCrashBeforeAck(t *testing.T) {
	c := cfg
	c.Faults = []faults.Fault{faults.CrashBeforeAck(), faults.LostAck()}
	res := run(t, twiceasynq.Job("ledger", rewards.NewRewardTask(9812), func(d *harness.Delivery) asynq.Handler {
		return &rewards.LedgerHandler{Pool: d.DB}
	}), c)
	assert.False(t, res.Idempotent(), "%s", res)
	for _, s := range res.Scenarios {
		assert.NotEqual(t, result.Idempotent, s.Verdict, "%s writes the line twice", s.Fault)
	}
}

// seen is what a handler read from asynq's context, per delivery.
type seen struct {
	payload              []byte
	kind                 queue.DeliveryKind
	attempt              int
	id, queue            string
	retryCount, maxRetry int
}

type recorder struct {
	mu  sync.Mutex
	got []seen
}

func (r *recorder) handler(d *harness.Delivery) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		n, _ := asynq.GetRetryCount(ctx)
		m, _ := asynq.GetMaxRetry(ctx)
		q, _ := asynq.GetQueueName(ctx)
		r.mu.Lock()
		r.got = append(r.got, seen{t.Payload(), d.Kind, d.Attempt, id, q, n, m})
		r.mu.Unlock()
		return (&rewards.RewardHandler{Pool: d.DB}).ProcessTask(ctx, t)
	})
}

// asynq counts a crash as a failure: the recoverer retries a task whose
// lease expired with ErrLeaseExpired, which increments its retry count,
// as does a handler's error. So every redelivery after a crash, a lost
// ack or a lost commit reply sees GetRetryCount one higher, and the
// context answers from the delivery.
func TestRetryCountCountsCrashes(t *testing.T) {
	for _, tc := range []struct {
		fault faults.Fault
		want  []int // retry counts the deliveries see, in order
	}{
		{faults.CrashAt(1), []int{0, 1}},
		{faults.CrashBeforeAck(), []int{0, 1}},
		{faults.LostAck(), []int{0, 1}},
		{faults.AmbiguousCommitAt(4), []int{0, 1}},
		{faults.Replay(mustParse(t, "j1a1w1!crash:1 > +2m j1a2w2!crash:2 > +2m j1a3w3")), []int{0, 1, 2}},
	} {
		rec := &recorder{}
		c := cfg
		c.Faults = []faults.Fault{tc.fault}
		payload, err := json.Marshal(rewards.RewardPayload{OrderID: 9812})
		require.NoError(t, err)
		task := asynq.NewTask(rewards.TypeReward, payload)
		res := run(t, twiceasynq.Job("reward", task, rec.handler,
			twiceasynq.Enqueue(asynq.MaxRetry(7), asynq.Queue("critical"))), c)
		assert.True(t, res.Idempotent(), "%s", res)
		require.NotEmpty(t, rec.got)
		for _, g := range rec.got {
			assert.Equal(t, g.retryCount+1, g.attempt, "the delivery's attempt is asynq's retry count + 1")
			assert.Equal(t, "critical", g.queue)
			assert.Equal(t, 7, g.maxRetry)
			assert.Equal(t, payload, g.payload, "the task asynq dequeued carries the payload enqueued")
		}
		for _, s := range res.Scenarios {
			var attempts []int
			for _, d := range s.Deliveries {
				attempts = append(attempts, d.Attempt-1)
				assert.Equal(t, s.Deliveries[0].JobID, d.JobID)
			}
			assert.Equal(t, tc.want, attempts, "retry counts under %s: %s", s.Schedule, res)
		}
	}
}

// A task whose retries are spent is archived by the recoverer after a
// crash: it never completes, which is a finding.
func TestCrashesSpendRetries(t *testing.T) {
	c := cfg
	c.Faults = []faults.Fault{faults.CrashAt(1)}
	res := run(t, twiceasynq.Job("reward", rewards.NewRewardTask(9812), reward, twiceasynq.Enqueue(asynq.MaxRetry(0))), c)
	require.False(t, res.Idempotent(), "%s", res)
	assert.Contains(t, res.String(), "archived")
}

// When a second worker gets the task while the first still runs (its
// lease expired: it lost its heartbeats), asynq's processor has already
// cancelled the first handler's context: at the lease's 30s, or at the
// task's Timeout if sooner, when it records the failure (retry count 1).
// The deduplicating handler awards once either way.
func TestLeaseExpiryCancelsTheHandler(t *testing.T) {
	for _, tc := range []struct {
		opts []asynq.Option
		want string
	}{
		{nil, "context cancelled by the queue 30s"},
		{[]asynq.Option{asynq.Timeout(10 * time.Second)}, "context cancelled by the queue 10s"},
	} {
		c := cfg
		c.Faults = []faults.Fault{faults.VisibilityTimeout()}
		res := run(t, twiceasynq.Job("reward", rewards.NewRewardTask(9812), reward, twiceasynq.Enqueue(tc.opts...)), c)
		assert.True(t, res.Idempotent(), "%s", res)
		var cancelled bool
		for _, s := range res.Scenarios {
			for _, d := range s.Deliveries {
				cancelled = cancelled || strings.Contains(d.Fault, tc.want)
				if d.Kind == queue.DeliveryRedelivery && d.NotDelivered == "" {
					assert.Equal(t, 2, d.Attempt, "the redelivery's retry count is 1: %s", res)
				}
			}
		}
		assert.True(t, cancelled, "%s: %s", tc.want, res)
	}
}

// SkipRetry archives the task at once, so a handler that gives up on
// its retry leaves the job undone after a crash before the ack: a
// finding. RevokeTask drops the task as finished on purpose: the same
// handler passes.
func TestSkipRetryAndRevoke(t *testing.T) {
	for _, tc := range []struct {
		err        error
		idempotent bool
	}{
		{asynq.SkipRetry, false},
		{asynq.RevokeTask, true},
	} {
		c := cfg
		c.Faults = []faults.Fault{faults.CrashBeforeAck()}
		job := twiceasynq.Job("once-only", rewards.NewRewardTask(9812), func(d *harness.Delivery) asynq.Handler {
			return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
				if n, _ := asynq.GetRetryCount(ctx); n > 0 {
					return fmt.Errorf("not retrying: %w", tc.err)
				}
				return (&rewards.LedgerHandler{Pool: d.DB}).ProcessTask(ctx, t)
			})
		})
		res := run(t, job, c)
		assert.Equal(t, tc.idempotent, res.Idempotent(), "%v: %s", tc.err, res)
		if !tc.idempotent {
			assert.Contains(t, res.String(), "archived: asynq.SkipRetry")
		}
	}
}

// Bad input is a clear error naming the job and the delivery: a task type
// the worker's ServeMux does not serve, and a handler that panics.
func TestBadInputNamesTheJob(t *testing.T) {
	_, err := harness.Run(context.Background(), twiceasynq.Job("unserved", asynq.NewTask("reward:unknown", nil),
		func(d *harness.Delivery) asynq.Handler { return rewards.NewMux(d.DB) }), cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `twiceasynq: job "unserved", task `)
	assert.Contains(t, err.Error(), `the asynq.ServeMux has no handler for type "reward:unknown"`)

	_, err = harness.Run(context.Background(), twiceasynq.Job("panics", rewards.NewRewardTask(9812),
		func(*harness.Delivery) asynq.Handler {
			return asynq.HandlerFunc(func(context.Context, *asynq.Task) error { panic("lost the order") })
		}), cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `twiceasynq: job "panics", task `)
	assert.Contains(t, err.Error(), "(type \"reward:order\", retry count 0): handler panicked: lost the order")

	_, err = harness.Run(context.Background(), twiceasynq.Job("grouped", rewards.NewRewardTask(9812), reward,
		twiceasynq.Enqueue(asynq.Group("daily"))), cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `twiceasynq: job "grouped": Group("daily"): task aggregation (Group) is not supported by twiceasynq yet`)
}

func mustParse(t *testing.T, s string) faults.Schedule {
	t.Helper()
	sched, err := faults.Parse(s)
	require.NoError(t, err)
	return sched
}

// Exploration draws schedules over asynq's queue too: with one task ID,
// the handler that deduplicates by it survives whatever it draws.
func TestExploreRewardHandler(t *testing.T) {
	opts := harness.ExploreOptions{Checks: 15, Limits: faults.Limits{Jobs: 1}}
	res, err := harness.ExploreRun(context.Background(), twiceasynq.Job("reward", rewards.NewRewardTask(9812), reward), cfg, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.Result.DropDatabases(context.Background()) })
	assert.Empty(t, res.Result.Scenarios, "%s", res.Result)
}

// asynq never hands out a task whose lease holds, so the second delivery
// of concurrent-delivery is refused in every order: the check runs one.
func TestRewardConcurrentDeliveryRunsOneOrder(t *testing.T) {
	c := cfg
	c.Faults = []faults.Fault{faults.ConcurrentDelivery()}
	res := run(t, twiceasynq.Job("reward", rewards.NewRewardTask(9812), reward), c)
	assert.True(t, res.Idempotent(), "%s", res)
	require.Len(t, res.Scenarios, 1, "%s", res)
	require.Len(t, res.Scenarios[0].Deliveries, 2)
	assert.Contains(t, res.Scenarios[0].Deliveries[1].NotDelivered, "lease holds")
	require.Len(t, res.Reductions, 1)
	red := res.Reductions[0]
	assert.Nil(t, red.HandedOut)
	assert.Equal(t, 1, red.Orders)
	assert.Positive(t, red.Refused)
}

// The checkout's own EnqueueReward runs for every enqueue, at the copy's
// time: with asynq's random task IDs its retry is a second task, which
// the handler (idempotent by task ID) awards again; keyed by the order,
// asynq refuses the retry and the check passes.
func TestProducersOwnEnqueue(t *testing.T) {
	job := func(keyed bool) harness.Job {
		return twiceasynq.Job("reward-checkout", rewards.NewRewardTask(9812), reward,
			twiceasynq.Producer(func(ctx context.Context, p twiceasynq.Producing) error {
				return rewards.EnqueueReward(ctx, p.Client, 9812, keyed)
			}))
	}
	res := run(t, job(false), cfg)
	var found []faults.Name
	for _, s := range res.Failed() {
		found = append(found, s.Fault)
	}
	assert.Contains(t, found, faults.NameProducerRetry, "%s", res)
	res = run(t, job(true), cfg)
	assert.True(t, res.Idempotent(), "%s", res)
	var refused int
	for _, s := range res.Scenarios {
		for _, d := range s.Deliveries {
			if strings.Contains(d.NotDelivered, "task ID conflicts") || strings.Contains(d.NotDelivered, "enqueued no task") {
				refused++
			}
		}
	}
	assert.Positive(t, refused, "asynq or the checkout refused the retries: %s", res)

	// The code's own Retention(24h) runs on the harness clock: a copy an
	// hour later is refused, one 25 hours later is a new task under the
	// same ID, which the handler's processed_tasks row skips.
	later := cfg
	later.Faults = []faults.Fault{faults.ProducerCopyAt(time.Hour), faults.ProducerCopyAt(25 * time.Hour)}
	res = run(t, job(true), later)
	require.Len(t, res.Scenarios, 2, "%s", res)
	for i, delivered := range []bool{false, true} {
		sc := res.Scenarios[i]
		assert.Equal(t, result.Idempotent, sc.Verdict, "%s", sc.Schedule)
		require.Len(t, sc.Deliveries, 2, "%s", sc.Schedule)
		assert.Equal(t, delivered, sc.Deliveries[1].NotDelivered == "", "%s: %s", sc.Schedule, sc.Deliveries[1].NotDelivered)
	}
}

// The producer's code must enqueue one task of the Job's type.
func TestProducerMisuse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		produce func(context.Context, twiceasynq.Producing) error
		want    string
	}{
		{"nothing", func(context.Context, twiceasynq.Producing) error { return nil }, `enqueue 1 enqueued no task of type "reward:order"`},
		{"another type", func(ctx context.Context, p twiceasynq.Producing) error {
			_, err := p.Client.EnqueueContext(ctx, asynq.NewTask("ledger:order", nil))
			return err
		}, `enqueued no task of type "reward:order" (it enqueued ["ledger:order"])`},
		{"another queue", func(ctx context.Context, p twiceasynq.Producing) error {
			_, err := p.Client.EnqueueContext(ctx, rewards.NewRewardTask(9812), asynq.Queue("critical"))
			return err
		}, `enqueued into queue "critical", but Job's task names queue "default"`},
		{"an error", func(context.Context, twiceasynq.Producing) error { return fmt.Errorf("redis down") }, "enqueue 1 returned: redis down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := twiceasynq.Job("reward", rewards.NewRewardTask(9812), reward, twiceasynq.Producer(tc.produce))
			res, err := harness.Run(context.Background(), job, harness.Config{Setup: cfg.Setup, Faults: []faults.Fault{faults.ProducerRetry()}})
			if res != nil {
				t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := harness.Run(context.Background(), twiceasynq.Job("reward", rewards.NewRewardTask(9812), reward,
		twiceasynq.Producer(func(context.Context, twiceasynq.Producing) error { return nil }),
		twiceasynq.Copies(func(int, time.Time) *asynq.Task { return nil })), cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "both Copies and Producer say how the task is enqueued")
}
