package loyalty_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vgarvardt/gue/v5"

	twicegue "github.com/runtwice/twice/adapters/gue"
	"github.com/runtwice/twice/adapters/gue/example/loyalty"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/harness/result"
)

var cfg = harness.Config{Setup: []harness.Setup{harness.SQL(loyalty.Schema)}}

var order = loyalty.RewardArgs{OrderID: 9812}

func run(t *testing.T, job harness.Job, c harness.Config) *harness.Result {
	t.Helper()
	res, err := harness.Run(context.Background(), job, c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	return res
}

func workFunc(wf gue.WorkFunc) func(*harness.Delivery) gue.WorkFunc {
	return func(*harness.Delivery) gue.WorkFunc { return wf }
}

func reward(wf gue.WorkFunc) harness.Job {
	return twicegue.Job("reward", twicegue.Spec[loyalty.RewardArgs]{Type: loyalty.RewardType, Args: order}, workFunc(wf))
}

func ledger() harness.Job {
	return twicegue.Job("ledger", twicegue.Spec[loyalty.RewardArgs]{Type: loyalty.LedgerType, Args: order},
		func(d *harness.Delivery) gue.WorkFunc { return loyalty.Ledger{Pool: d.DB}.Work })
}

func failedFaults(res *harness.Result) []faults.Name {
	var out []faults.Name
	for _, s := range res.Scenarios {
		if s.Verdict != result.Idempotent && !slices.Contains(out, s.Fault) {
			out = append(out, s.Fault)
		}
	}
	return out
}

func firstWord(sql string) string { return strings.ToLower(strings.Fields(sql)[0]) }

// The lock, the WorkFunc's write and gue's ack are the delivery's steps:
// LockJobByID's BEGIN and SELECT ... FOR UPDATE SKIP LOCKED, the write in
// j.Tx(), j.Delete and j.Done's COMMIT. The enqueue and the harness's
// side of the queue are not.
func TestRewardSteps(t *testing.T) {
	res := run(t, reward(loyalty.Reward), cfg)
	var words []string
	for _, s := range res.Steps {
		words = append(words, firstWord(s.SQL))
	}
	assert.Equal(t, []string{"begin", "select", "with", "delete", "commit"}, words)
	assert.Contains(t, res.Steps[1].SQL, "FOR UPDATE SKIP LOCKED")
	assert.True(t, res.Steps[4].CommitPoint, "gue's COMMIT is a commit point")
	assert.True(t, res.Idempotent(), "%s", res)
	t.Logf("reference steps of a gue WorkFunc doing one write: %d; default matrix: %d scenarios", len(res.Steps), len(res.Scenarios))
}

// Writing in j.Tx() makes every redelivery of the job harmless; only a
// second job for the same order (the producer's copy) awards again.
func TestRewardPerJobFailsOnlyProducerCopies(t *testing.T) {
	res := run(t, reward(loyalty.RewardPerJob), cfg)
	assert.ElementsMatch(t, []faults.Name{faults.NameProducerRetry, faults.NameConcurrentProducerRetry}, failedFaults(res), "%s", res)
}

// gue's ack is the delivery's own COMMIT, so after a crash before the
// harness's ack, or a lost one, the redelivery finds the job deleted.
func TestRedeliveryAfterTheCommitIsNotDelivered(t *testing.T) {
	c := cfg
	c.Faults = []faults.Fault{faults.CrashBeforeAck(), faults.LostAck()}
	res := run(t, reward(loyalty.Reward), c)
	require.True(t, res.Idempotent(), "%s", res)
	require.NotEmpty(t, res.Scenarios)
	for _, s := range res.Scenarios {
		require.GreaterOrEqual(t, len(s.Deliveries), 2, "%s", s.Schedule)
		assert.Contains(t, s.Deliveries[1].NotDelivered, "no longer in gue_jobs", "%s", s.Schedule)
		assert.Empty(t, s.Deliveries[1].Steps)
	}
}

// A WorkFunc that writes on its own connection commits before gue's
// transaction deletes the job: a crash at j.Done's COMMIT (or its DELETE)
// leaves the line written and the job queued, and the redelivery writes
// it again.
func TestLedgerFoundByACrashBeforeDone(t *testing.T) {
	res := run(t, ledger(), cfg)
	require.Contains(t, failedFaults(res), faults.NameCrashMidJob, "%s", res)
	var atCommit bool
	for _, s := range res.Scenarios {
		if s.Fault != faults.NameCrashMidJob || s.Verdict == result.Idempotent {
			continue
		}
		f := s.Deliveries[0].Faulted()
		require.NotNil(t, f, "%s", s.Schedule)
		if firstWord(f.SQL) == "commit" {
			atCommit = true
			require.GreaterOrEqual(t, len(s.Deliveries), 2)
			assert.Equal(t, queue.DeliveryRedelivery, s.Deliveries[1].Kind)
			assert.Empty(t, s.Deliveries[1].NotDelivered, "gue hands the job out again once the dead attempt's lock is gone")
		}
	}
	assert.True(t, atCommit, "a crash at j.Done's COMMIT is a finding: %s", res)
}

// The COMMIT of j.Done is applied and its reply lost: Done fails, the
// job is deleted all the same, and the j.Tx() WorkFunc awarded once.
func TestAmbiguousDoneCommit(t *testing.T) {
	c := cfg
	c.Faults = []faults.Fault{faults.AmbiguousCommits()}
	res := run(t, reward(loyalty.Reward), c)
	require.True(t, res.Idempotent(), "%s", res)
	var seen bool
	for _, s := range res.Scenarios {
		d := s.Deliveries[0]
		if f := d.Faulted(); f == nil || firstWord(f.SQL) != "commit" {
			continue
		}
		seen = true
		assert.Contains(t, d.Err, "j.Done could not commit")
		assert.Equal(t, "completed", d.Settled)
	}
	assert.True(t, seen, "a scenario loses the reply of j.Done's COMMIT: %s", res)
}

// Two workers handed the job at once: LockJobByID lets one lock it; the
// other finds it locked or deleted and does nothing, as gue's worker.
func TestConcurrentDeliveryOneLocks(t *testing.T) {
	c := cfg
	c.Faults = []faults.Fault{faults.ConcurrentDelivery(), faults.VisibilityTimeout()}
	res := run(t, reward(loyalty.RewardPerJob), c)
	require.True(t, res.Idempotent(), "%s", res)
	var missed, waited bool
	for _, s := range res.Scenarios {
		for _, d := range s.Deliveries {
			missed = missed || strings.Contains(d.Settled, "LockJobByID found it locked")
			waited = waited || strings.Contains(d.NotDelivered, "another attempt held its lock")
		}
	}
	assert.True(t, missed, "some interleaving has the second worker miss the lock: %s", res)
	assert.True(t, waited, "a redelivery while the first attempt holds the lock is not delivered: %s", res)
}

// gue.ErrRescheduleJobIn is a snooze on the harness clock, not a failure:
// the job runs again when the reminder is due and records it once. (The
// reminder does not deduplicate by order, so producer copies are left
// out.)
func TestRescheduleIsNotAFinding(t *testing.T) {
	c := cfg
	c.Faults = faults.DefaultWithout(faults.NameProducerRetry, faults.NameConcurrentProducerRetry)
	due := time.Date(2026, 1, 1, 9, 5, 0, 0, time.UTC) // five minutes after the harness clock starts
	res := run(t, twicegue.Job("reminder", twicegue.Spec[loyalty.ReminderArgs]{Type: loyalty.ReminderType, Args: loyalty.ReminderArgs{OrderID: 9812, DueAt: due}},
		func(d *harness.Delivery) gue.WorkFunc { return loyalty.Reminder{Now: d.Now}.Work }), c)
	assert.True(t, res.Idempotent(), "%s", res)
	var rows int
	for _, tb := range res.Reference.Tables {
		if tb.Name == "ledger" {
			rows = len(tb.Rows)
		}
	}
	assert.Equal(t, 1, rows, "the clean run records the reminder once, after its reschedule")
}

// badArgs encode into JSON they cannot decode from.
type badArgs struct{}

func (badArgs) MarshalJSON() ([]byte, error) { return []byte(`"soon"`), nil }
func (*badArgs) UnmarshalJSON([]byte) error  { return errors.New("not an order") }

// Bad input is a clear error naming the job and the delivery: args that
// do not decode into the spec's type, and a WorkFunc that panics.
func TestBadInputNamesTheJobAndDelivery(t *testing.T) {
	_, err := harness.Run(context.Background(), twicegue.Job("bad-args", twicegue.Spec[badArgs]{Type: "bad"}, workFunc(loyalty.Reward)), cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `job "bad-args" failed on its clean reference run 1`)
	assert.Contains(t, err.Error(), `twicegue: job "bad-args", gue job `)
	assert.Contains(t, err.Error(), `(type "bad", delivery 1, first): its args "soon" do not decode into loyalty_test.badArgs: not an order`)

	_, err = harness.Run(context.Background(), reward(func(context.Context, *gue.Job) error { panic("lost the order") }), cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `job "reward" failed on its clean reference run 1`)
	assert.Contains(t, err.Error(), `(type "reward_order", delivery 1, first): the WorkFunc panicked: lost the order (job panicked)`)

	_, err = harness.Run(context.Background(), twicegue.Job("bad-chan", twicegue.Spec[chan int]{Type: "chan", Args: make(chan int)}, workFunc(loyalty.Reward)), cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `job "bad-chan": its queue could not enqueue job 1`)
}

// Exploration draws schedules over gue's queue too: crashes, lost
// replies, overlaps and producer copies at random. The j.Tx() WorkFunc
// that claims its order survives whatever it draws, and no schedule
// breaks the adapter (an internal error would fail ExploreRun).
func TestExploreReward(t *testing.T) {
	res, err := harness.ExploreRun(context.Background(), reward(loyalty.Reward), cfg, harness.ExploreOptions{Checks: 30})
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.Result.DropDatabases(context.Background()) })
	assert.Empty(t, res.Result.Scenarios, "failing schedules: %s", res.Result)
}

// gue.ErrDiscardJob gives the job up on purpose: gue deletes it, the
// queue shows it cancelled, and the check has nothing to hold against
// it. A backoff that gives up discards a failing job: it did not
// complete.
func TestDiscards(t *testing.T) {
	c := cfg
	c.Faults = []faults.Fault{faults.RunTwice()}
	res := run(t, reward(func(ctx context.Context, j *gue.Job) error {
		if _, err := j.Tx().Exec(ctx, `UPDATE accounts SET points = 0 WHERE id = 1`); err != nil {
			return err
		}
		return gue.ErrDiscardJob("the order was refunded")
	}), c)
	require.True(t, res.Idempotent(), "%s", res)
	assert.Equal(t, "cancelled: the WorkFunc returned gue.ErrDiscardJob", res.Scenarios[0].Deliveries[0].Settled)
	assert.Contains(t, res.Scenarios[0].Deliveries[1].NotDelivered, "was discarded: the WorkFunc returned gue.ErrDiscardJob")

	_, err := harness.Run(context.Background(), twicegue.Job("refused", twicegue.Spec[loyalty.RewardArgs]{Type: loyalty.RewardType, Args: order},
		workFunc(func(context.Context, *gue.Job) error { return errors.New("payment provider down") }),
		twicegue.Backoff(gue.BackoffNever)), c)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `job "refused" failed on its clean reference run 1`)
	assert.Contains(t, err.Error(), "payment provider down")
}

// The service's own RequestReward runs for every enqueue, in the
// transaction it is given: enqueueing on every request, its retry is a
// second job, awarded again by RewardPerJob; keyed by the order, the
// retry finds the request and enqueues nothing, and RewardPerJob passes.
func TestProducersOwnEnqueue(t *testing.T) {
	job := func(once bool) harness.Job {
		return twicegue.Job("reward-requested", twicegue.Spec[loyalty.RewardArgs]{Type: loyalty.RewardType}, workFunc(loyalty.RewardPerJob),
			twicegue.Producer(func(ctx context.Context, p twicegue.Producing) error {
				return loyalty.RequestReward(ctx, p.Tx, p.Client, p.Now(), 9812, once)
			}))
	}
	res := run(t, job(false), cfg)
	assert.Subset(t, failedFaults(res), []faults.Name{faults.NameProducerRetry, faults.NameLateProducerRetry}, "%s", res)
	res = run(t, job(true), cfg)
	assert.True(t, res.Idempotent(), "%s", res)
	var refused int
	for _, s := range res.Scenarios {
		for _, d := range s.Deliveries {
			if strings.Contains(d.NotDelivered, "the producer's code enqueued no job of type") {
				refused++
			}
		}
	}
	assert.Positive(t, refused, "the retries were refused by the producer itself: %s", res)
}

// The producer's code must enqueue one job of the Spec's type.
func TestProducerMisuse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		produce func(context.Context, twicegue.Producing) error
		want    string
	}{
		{"nothing", func(context.Context, twicegue.Producing) error { return nil }, `enqueue 1 enqueued no job of type "reward_order"`},
		{"another type", func(ctx context.Context, p twicegue.Producing) error {
			return p.Client.Enqueue(ctx, &gue.Job{Type: loyalty.LedgerType})
		}, `enqueued no job of type "reward_order" (it enqueued ["ledger_order"])`},
		{"two", func(ctx context.Context, p twicegue.Producing) error {
			return p.Client.EnqueueBatch(ctx, []*gue.Job{{Type: loyalty.RewardType}, {Type: loyalty.RewardType}})
		}, `enqueued 2 jobs of type "reward_order" in one call`},
		{"an error", func(context.Context, twicegue.Producing) error { return errors.New("db down") }, "enqueue 1 returned: db down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := twicegue.Job("reward", twicegue.Spec[loyalty.RewardArgs]{Type: loyalty.RewardType}, workFunc(loyalty.Reward), twicegue.Producer(tc.produce))
			res, err := harness.Run(context.Background(), job, harness.Config{Setup: cfg.Setup, Faults: []faults.Fault{faults.ProducerRetry()}})
			if res != nil {
				t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// A producer that schedules with the wall clock (time.Now().Add, or no
// RunAt, which gue stamps with time.Now()) is due as far from its
// enqueue on the harness clock.
func TestProducersWallClockRunAt(t *testing.T) {
	for _, wait := range []time.Duration{0, time.Hour} {
		var mu sync.Mutex
		var enqueued, delivered time.Time
		job := twicegue.Job("reward-later", twicegue.Spec[loyalty.RewardArgs]{Type: loyalty.RewardType},
			func(d *harness.Delivery) gue.WorkFunc {
				return func(context.Context, *gue.Job) error {
					mu.Lock()
					defer mu.Unlock()
					if delivered.IsZero() {
						delivered = d.Now()
					}
					return nil
				}
			},
			twicegue.Producer(func(ctx context.Context, p twicegue.Producing) error {
				mu.Lock()
				if enqueued.IsZero() {
					enqueued = p.Now()
				}
				mu.Unlock()
				j := &gue.Job{Type: loyalty.RewardType, Args: []byte(`{"order_id":9812}`)}
				if wait > 0 {
					j.RunAt = time.Now().Add(wait)
				}
				return p.Client.Enqueue(ctx, j)
			}))
		res := run(t, job, harness.Config{Setup: cfg.Setup, Faults: []faults.Fault{faults.RunTwice()}})
		require.NotEmpty(t, res.Scenarios)
		mu.Lock()
		defer mu.Unlock()
		assert.InDelta(t, wait.Seconds(), delivered.Sub(enqueued).Seconds(), 1, "due %v after the enqueue on the harness clock", wait)
	}
}
