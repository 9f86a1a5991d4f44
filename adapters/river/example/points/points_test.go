package points_test

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twiceriver "github.com/runtwice/twice/adapters/river"
	"github.com/runtwice/twice/adapters/river/example/points"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/harness/result"
)

var cfg = harness.Config{Setup: []harness.Setup{harness.SQL(points.Schema)}}

func run(t *testing.T, job harness.Job, c harness.Config) *harness.Result {
	t.Helper()
	res, err := harness.Run(context.Background(), job, c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	return res
}

func failedFaults(res *harness.Result) []faults.Name {
	var out []faults.Name
	for _, s := range res.Scenarios {
		if s.Verdict != result.Idempotent && !containsName(out, s.Fault) {
			out = append(out, s.Fault)
		}
	}
	return out
}

func containsName(names []faults.Name, n faults.Name) bool {
	for _, m := range names {
		if m == n {
			return true
		}
	}
	return false
}

func reward(guard points.Guard, detached bool) func(*harness.Delivery) river.Worker[points.RewardArgs] {
	return func(d *harness.Delivery) river.Worker[points.RewardArgs] {
		return &points.RewardWorker{Pool: d.DB, Guard: guard, Detached: detached}
	}
}

func rewardTimeout(timeout time.Duration) func(*harness.Delivery) river.Worker[points.RewardArgs] {
	return func(d *harness.Delivery) river.Worker[points.RewardArgs] {
		return &points.RewardWorker{Pool: d.DB, AttemptTimeout: timeout}
	}
}

// Only the worker's own statements are steps: River's insert, fetch and
// completer run on the harness's connection.
func TestRewardStepsAreTheWorkersOwn(t *testing.T) {
	res := run(t, twiceriver.Job("reward", points.RewardArgs{OrderID: 9812}, reward(points.NoGuard, false)), cfg)
	var sqls []string
	for _, s := range res.Steps {
		sql := strings.ToLower(strings.Fields(s.SQL)[0])
		if strings.Contains(s.SQL, "JobSetStateIfRunningMany") {
			sql = "JobCompleteTx"
		}
		sqls = append(sqls, sql)
	}
	// begin, the award, JobCompleteTx's update, commit.
	assert.Equal(t, []string{"begin", "update", "JobCompleteTx", "commit"}, sqls)
	t.Logf("reference steps of a River worker doing one write plus JobCompleteTx: %d", len(res.Steps))
}

// A worker that runs on past River's cancellation (a detached context)
// is rescued at its timeout plus the rescuer's hour, and its second
// attempt overlaps the first; JobCompleteTx does not check the attempt,
// so both award the points. The attempt guard rolls the stale attempt
// back.
func TestRewardOverlappingAttempts(t *testing.T) {
	c := cfg
	c.Faults = []faults.Fault{faults.VisibilityTimeout()}
	res := run(t, twiceriver.Job("reward-detached", points.RewardArgs{OrderID: 9812}, reward(points.NoGuard, true)), c)
	require.False(t, res.Idempotent(), "overlapping attempts both award: %s", res)
	var shown bool
	for _, s := range res.Scenarios {
		for _, d := range s.StateDiff {
			if d.Table == "accounts" && strings.Contains(d.Diff, "220") {
				shown = true
			}
		}
	}
	assert.True(t, shown, "the accounts diff shows 220 points instead of 170: %s", res)

	guarded := run(t, twiceriver.Job("reward-guarded", points.RewardArgs{OrderID: 9812}, reward(points.GuardCurrent, true)), c)
	if riverMinor(t) >= 48 {
		assert.True(t, guarded.Idempotent(), "the attempt guard keeps one award: %s", guarded)
		return
	}
	// Before v0.48.0 River's rescuer overwrote a job that completed while
	// its rescue waited on the row lock (riverqueue/river#1302, fixed by
	// PR #1373): the first attempt commits its award and completion, the
	// rescue makes the job retryable anyway, and the second attempt awards
	// again. No guard in the worker can see that; the check does.
	assert.False(t, guarded.Idempotent(), "River %s's rescuer overwrites the completed job: %s", riverVersion(t), guarded)
}

// riverVersion is the River version the test binary was built with,
// read from where its code was compiled from (the module cache's
// github.com/riverqueue/river@v0.x.y; test binaries carry no module
// list).
func riverVersion(t *testing.T) string {
	t.Helper()
	pc := reflect.ValueOf(river.NewWorkers).Pointer()
	file, _ := runtime.FuncForPC(pc).FileLine(pc)
	_, after, ok := strings.Cut(file, "github.com/riverqueue/river@")
	require.True(t, ok, "River's code at %s is not from a versioned module", file)
	v, _, _ := strings.Cut(after, "/")
	return v
}

// riverMinor is the minor number of River's v0 version.
func riverMinor(t *testing.T) int {
	t.Helper()
	v := riverVersion(t)
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	require.Len(t, parts, 3, "River version %q", v)
	require.Equal(t, "0", parts[0], "River version %q: the adapter knows River v0", v)
	n, err := strconv.Atoi(parts[1])
	require.NoError(t, err, "River version %q", v)
	return n
}

// The two simpler guards fail on the schedules exploration found; the
// full one passes both.
func TestRewardGuards(t *testing.T) {
	// The stale attempt's error lets River's completer mark the job
	// retryable under attempt 2, which commits anyway; attempt 3 awards
	// again.
	overlap := "j1a1w1 > +1h0m1s j1a2w2@1:2 order 1,1,2,2,2,2,1,1"
	// Attempt 2, rescued while attempt 1 runs, dies at once; attempt 1
	// returns nil and River's completer marks the job completed.
	rescuedThenDead := "j1a1w1 > j1a2w2@1:0!crash:1 > +1h0m1s j1a3w3!crash:1"
	for _, tc := range []struct {
		guard points.Guard
		sched string
		want  bool // idempotent
	}{
		{points.GuardAttemptErr, overlap, false},
		{points.GuardAttemptNil, rescuedThenDead, false},
		{points.GuardCurrent, overlap, true},
		{points.GuardCurrent, rescuedThenDead, true},
	} {
		s, err := faults.Parse(tc.sched)
		require.NoError(t, err)
		c := cfg
		c.Faults = []faults.Fault{faults.Replay(s)}
		res := run(t, twiceriver.Job("reward", points.RewardArgs{OrderID: 9812}, reward(tc.guard, true)), c)
		assert.Equal(t, tc.want, res.Idempotent(), "guard %d under %s: %s", tc.guard, tc.sched, res)
	}
}

// With River's default timeout the first attempt's context is cancelled
// at one minute, long before the rescuer's hour: the worker honours it,
// so no second attempt ever overlaps, and the unguarded worker passes the
// default matrix. Only a producer that enqueues the job twice awards
// twice: the job is not unique.
func TestRewardDefaultTimeoutNeverOverlaps(t *testing.T) {
	c := cfg
	c.Faults = faults.DefaultWithout(faults.NameProducerRetry, faults.NameConcurrentProducerRetry)
	res := run(t, twiceriver.Job("reward", points.RewardArgs{OrderID: 9812}, reward(points.NoGuard, false)), c)
	assert.True(t, res.Idempotent(), "%s", res)
	var cancelled, notDelivered bool
	for _, s := range res.Scenarios {
		for _, d := range s.Deliveries {
			cancelled = cancelled || strings.Contains(d.Fault, "context cancelled by the queue")
			notDelivered = notDelivered || d.NotDelivered != ""
		}
	}
	assert.True(t, cancelled, "visibility-timeout schedules cancel the first attempt")
	assert.True(t, notDelivered, "a concurrent delivery of a running job is not delivered")

	c.Faults = []faults.Fault{faults.ProducerRetry()}
	twice := run(t, twiceriver.Job("reward", points.RewardArgs{OrderID: 9812}, reward(points.NoGuard, false)), c)
	assert.False(t, twice.Idempotent(), "two jobs with the same args award twice")
}

// River's rescuer leaves a running job alone until the worker's own
// Timeout has passed, not only RescueStuckJobsAfter: a correct worker
// whose attempts may take two hours, with the rescuer at one, is never
// handed out while an attempt runs, and passes every scenario.
func TestLongTimeoutWorkerPassesEveryScenario(t *testing.T) {
	job := twiceriver.Job("reward-2h", points.RewardArgs{OrderID: 9812}, rewardTimeout(2*time.Hour),
		twiceriver.RescueAfter(time.Hour),
		twiceriver.InsertOpts(&river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}))
	res := run(t, job, cfg)
	assert.True(t, res.Idempotent(), "%s", res)
	var refused, cancelled bool
	for _, s := range res.Scenarios {
		if s.Fault != faults.NameVisibilityTimeout {
			continue
		}
		for _, d := range s.Deliveries {
			cancelled = cancelled || strings.Contains(d.Fault, "context cancelled by the queue")
			refused = refused || strings.Contains(d.NotDelivered, "is running")
		}
	}
	assert.True(t, cancelled, "visibility-timeout cancels the first attempt at its 2h timeout, before the rescue: %s", res)
	assert.False(t, refused, "past the 2h timeout River rescues the job, never refused as running: %s", res)
}

// River never rescues a job whose timeout is negative: a worker with no
// timeout that dies mid-attempt leaves its job running for ever, work
// that is lost, which the check reports as a job that did not complete.
func TestNoTimeoutCrashLeavesJobRunning(t *testing.T) {
	c := cfg
	c.Faults = []faults.Fault{faults.CrashAtEveryStep()}
	res := run(t, twiceriver.Job("reward-no-timeout", points.RewardArgs{OrderID: 9812}, rewardTimeout(-1)), c)
	require.False(t, res.Idempotent(), "%s", res)
	require.NotEmpty(t, res.Scenarios)
	for _, s := range res.Scenarios {
		var incomplete bool
		for _, p := range s.Problems {
			incomplete = incomplete || p.Kind == result.DidNotComplete
		}
		assert.True(t, incomplete, "%s: the job did not complete: %+v", s.Schedule, s.Problems)
		require.GreaterOrEqual(t, len(s.Deliveries), 2, "%s", s.Schedule)
		assert.Contains(t, s.Deliveries[len(s.Deliveries)-1].NotDelivered, "has no timeout, so River's rescuer never hands it out again", "%s", s.Schedule)
	}
}

// A worker whose Timeout depends on the delivery cannot be timed by one
// rescue: the check says so instead of guessing.
func TestTimeoutThatChangesIsAnError(t *testing.T) {
	var calls int
	_, err := harness.Run(context.Background(), twiceriver.Job("reward-changing", points.RewardArgs{OrderID: 9812}, func(d *harness.Delivery) river.Worker[points.RewardArgs] {
		calls++
		return &points.RewardWorker{Pool: d.DB, AttemptTimeout: time.Duration(calls) * time.Hour}
	}), cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "timeout is 2h0m0s on this delivery but was 1h0m0s for the worker built before any delivery")
}

// River's own validation of the client's timing options.
func TestRiverRefusesRescueBeforeTimeout(t *testing.T) {
	_, err := harness.Run(context.Background(), twiceriver.Job("reward", points.RewardArgs{OrderID: 9812}, reward(points.NoGuard, false),
		twiceriver.JobTimeout(2*time.Hour), twiceriver.RescueAfter(time.Hour)), cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "RescueStuckJobsAfter cannot be less than JobTimeout")
}

// An autocommit write with completion left to River's completer is
// written twice when the worker dies after Work returned and before the
// completer ran.
func TestLedgerCrashBeforeCompletion(t *testing.T) {
	res := run(t, twiceriver.Job("ledger", points.LedgerArgs{OrderID: 9812}, func(d *harness.Delivery) river.Worker[points.LedgerArgs] {
		return &points.LedgerWorker{Pool: d.DB}
	}), cfg)
	assert.Contains(t, failedFaults(res), faults.NameCrashBeforeAck, "%s", res)
	for _, s := range res.Scenarios {
		if s.Fault == faults.NameCrashBeforeAck {
			require.Len(t, s.Deliveries, 2)
			assert.Equal(t, queue.DeliveryRedelivery, s.Deliveries[1].Kind)
		}
	}
}

// A child job inserted without UniqueOpts is inserted again when the
// producer enqueued the job twice; with UniqueOpts the second insert is a
// duplicate and the state matches the clean run.
func TestShipChildJobUnderProducerRetry(t *testing.T) {
	c := cfg
	c.Faults = []faults.Fault{faults.ProducerRetry()}
	ship := func(unique bool) func(*harness.Delivery) river.Worker[points.ShipArgs] {
		return func(d *harness.Delivery) river.Worker[points.ShipArgs] {
			return &points.ShipWorker{Pool: d.DB, Unique: unique}
		}
	}
	plain := run(t, twiceriver.Job("ship", points.ShipArgs{OrderID: 9812}, ship(false)), c)
	require.False(t, plain.Idempotent(), "%s", plain)
	assert.Equal(t, "river_job", plain.Scenarios[0].StateDiff[0].Table)

	unique := run(t, twiceriver.Job("ship-unique", points.ShipArgs{OrderID: 9812}, ship(true)), c)
	assert.True(t, unique.Idempotent(), "%s", unique)
}

// With the production client's workers bundle, a child job of a kind no
// worker serves fails the insert as River's client fails it; without the
// bundle the delivery's client is insert-only and lets it through.
func TestWorkersCheckChildKinds(t *testing.T) {
	c := cfg
	c.Faults = []faults.Fault{faults.RunTwice()}
	ship := func(d *harness.Delivery) river.Worker[points.ShipArgs] {
		return &points.ShipWorker{Pool: d.DB, Unique: true}
	}
	shipOnly := river.NewWorkers()
	river.AddWorker(shipOnly, &points.ShipWorker{})
	_, err := harness.Run(context.Background(), twiceriver.Job("ship-unknown-child", points.ShipArgs{OrderID: 9812}, ship, twiceriver.Workers(shipOnly)), c)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `job kind is not registered in the client's Workers bundle: notify_shipped`)

	both := river.NewWorkers()
	river.AddWorker(both, &points.ShipWorker{})
	river.AddWorker(both, river.WorkFunc(func(context.Context, *river.Job[points.NotifyArgs]) error { return nil }))
	res := run(t, twiceriver.Job("ship-known-child", points.ShipArgs{OrderID: 9812}, ship, twiceriver.Workers(both)), c)
	assert.True(t, res.Idempotent(), "%s", res)
}

// A producer's copy of a unique job is refused by River at insert: it is
// "not delivered", never handled.
func TestUniqueJobCopyIsNotDelivered(t *testing.T) {
	c := cfg
	c.Faults = []faults.Fault{faults.ProducerRetry()}
	res := run(t, twiceriver.Job("ledger-unique", points.LedgerArgs{OrderID: 9812}, func(d *harness.Delivery) river.Worker[points.LedgerArgs] {
		return &points.LedgerWorker{Pool: d.DB}
	}, twiceriver.InsertOpts(&river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}})), c)
	assert.True(t, res.Idempotent(), "%s", res)
	for _, s := range res.Scenarios {
		require.Len(t, s.Deliveries, 2)
		assert.Contains(t, s.Deliveries[1].NotDelivered, "duplicate")
		assert.Equal(t, queue.DeliveryProducerCopy, s.Deliveries[1].Kind)
		assert.Empty(t, s.Deliveries[1].Steps)
	}
}

// A worker that snoozes until its reminder is due is handed out again
// when the snooze ends; the snooze is not a failure and not a finding.
func TestSnoozeIsNotAFinding(t *testing.T) {
	due := time.Date(2026, 1, 1, 9, 5, 0, 0, time.UTC) // five minutes after the harness clock starts
	res := run(t, twiceriver.Job("reminder", points.ReminderArgs{OrderID: 9812, DueAt: due}, func(d *harness.Delivery) river.Worker[points.ReminderArgs] {
		return &points.ReminderWorker{Pool: d.DB, Now: d.Now}
	}), cfg)
	assert.True(t, res.Idempotent(), "%s", res)
	var rows int
	for _, tb := range res.Reference.Tables {
		if tb.Name == "ledger" {
			rows = len(tb.Rows)
		}
	}
	assert.Equal(t, 1, rows, "the clean run records the reminder once, after its snooze")
}

// BadArgs cannot be marshalled: River's insert fails.
type BadArgs struct {
	C chan int `json:"c"`
}

func (BadArgs) Kind() string { return "bad_args" }

type badWorker struct {
	river.WorkerDefaults[BadArgs]
}

func (badWorker) Work(context.Context, *river.Job[BadArgs]) error { return nil }

// Bad input is a clear error naming the job: arguments River cannot
// insert, and a worker that panics.
func TestBadInputNamesTheJob(t *testing.T) {
	_, err := harness.Run(context.Background(), twiceriver.Job("bad-args", BadArgs{C: make(chan int)}, func(*harness.Delivery) river.Worker[BadArgs] {
		return badWorker{}
	}), cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `job "bad-args": its queue could not enqueue job 1`)
	assert.Contains(t, err.Error(), "unsupported type")

	_, err = harness.Run(context.Background(), twiceriver.Job("panics", points.LedgerArgs{OrderID: 9812}, func(*harness.Delivery) river.Worker[points.LedgerArgs] {
		return panicker{}
	}), cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `job "panics" failed on its clean reference run 1`)
	assert.Contains(t, err.Error(), `twiceriver: job "panics", River job 1 (kind "ledger_order", attempt 1, first): Work panicked: lost the order`)

	_, err = harness.Run(context.Background(), twiceriver.Job("undecodable", undecodable{}, func(*harness.Delivery) river.Worker[undecodable] {
		return undecodableWorker{}
	}), cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `job "undecodable" failed on its clean reference run 1`)
	assert.Contains(t, err.Error(), `twiceriver: job "undecodable", River job 1 (attempt 1): its args "soon" do not decode into points_test.undecodable: not an order`)
}

// undecodable args marshal into JSON they cannot decode from.
type undecodable struct{}

func (undecodable) Kind() string                  { return "undecodable" }
func (undecodable) MarshalJSON() ([]byte, error)  { return []byte(`"soon"`), nil }
func (*undecodable) UnmarshalJSON(b []byte) error { return errors.New("not an order") }

type undecodableWorker struct {
	river.WorkerDefaults[undecodable]
}

func (undecodableWorker) Work(context.Context, *river.Job[undecodable]) error { return nil }

type panicker struct {
	river.WorkerDefaults[points.LedgerArgs]
}

func (panicker) Work(context.Context, *river.Job[points.LedgerArgs]) error { panic("lost the order") }

// Exploration draws schedules over River's queue too: with one job ID
// (the job is not unique, so a producer's copy awards again), the guarded
// worker with no timeout survives whatever it draws on River v0.48 and
// later. Before v0.48.0 exploration finds River's own rescuer bug
// (riverqueue/river#1302, see TestRewardOverlappingAttempts): a rescue
// waiting on the row lock of an attempt that completes makes the job
// retryable anyway, and the next attempt awards again.
func TestExploreRiverWorker(t *testing.T) {
	opts := harness.ExploreOptions{Checks: 25, Limits: faults.Limits{Jobs: 1}}
	guarded, err := harness.ExploreRun(context.Background(), twiceriver.Job("reward-guarded", points.RewardArgs{OrderID: 9812}, reward(points.GuardCurrent, true)), cfg, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = guarded.Result.DropDatabases(context.Background()) })
	if riverMinor(t) >= 48 {
		assert.Empty(t, guarded.Result.Scenarios, "the guarded worker: %s", guarded.Result)
		return
	}
	if guarded.Failed() {
		for _, s := range guarded.Result.Failed() {
			assert.Equal(t, []result.Problem{{Kind: result.StateDiffers, Table: "accounts"}}, s.Problems, "River %s: only the award counted twice: %s", riverVersion(t), s.Schedule)
		}
	}
}

// River never hands out a running job before its rescuer would, so the
// second delivery of concurrent-delivery is refused in every order: the
// default matrix runs one order of it (the other 34 ran alike, the second
// delivery not delivered), 40 scenarios instead of 74, with the same
// verdict.
func TestRewardConcurrentDeliveryRunsOneOrder(t *testing.T) {
	res := run(t, twiceriver.Job("reward", points.RewardArgs{OrderID: 9812}, reward(points.NoGuard, false)), cfg)
	var concurrent []result.Scenario
	for _, s := range res.Scenarios {
		if s.Fault == faults.NameConcurrentDelivery {
			concurrent = append(concurrent, s)
		}
	}
	require.Len(t, concurrent, 1, "%s", res)
	require.Len(t, concurrent[0].Deliveries, 2)
	assert.Contains(t, concurrent[0].Deliveries[1].NotDelivered, "is running (attempt 1)")
	var red *result.Reduction
	for i := range res.Reductions {
		if res.Reductions[i].Fault == faults.NameConcurrentDelivery {
			red = &res.Reductions[i]
		}
	}
	require.NotNil(t, red)
	assert.Nil(t, red.HandedOut)
	assert.Equal(t, 1, red.Orders)
	assert.Equal(t, 34, red.Pruned)
	// 74 schedules in all, less the 34 orders the queue refuses and the
	// crash points that crash classes leave out (crash-mid-job, redrive).
	classed := 0
	for _, r := range res.Reductions {
		if r.Fault == faults.NameCrashMidJob || r.Fault == faults.NameRedrive {
			classed += r.Pruned
		}
	}
	assert.Positive(t, classed)
	assert.Len(t, res.Scenarios, 74-34-classed)
	assert.Equal(t, []faults.Name{faults.NameProducerRetry, faults.NameConcurrentProducerRetry}, failedFaults(res), "without unique args only the producer's copies award twice: %s", res)
}
