package harness_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/recordtb"
)

const counterSchema = `
CREATE TABLE counters (name text PRIMARY KEY, n int NOT NULL);
INSERT INTO counters VALUES ('hits', 0);
CREATE TABLE events (
  id         bigserial PRIMARY KEY,
  job_id     text NOT NULL UNIQUE,
  created_at timestamptz NOT NULL DEFAULT now(),
  token      uuid NOT NULL DEFAULT gen_random_uuid()
);
`

func counterConfig() harness.Config {
	return harness.Config{Setup: []harness.Setup{harness.SQL(counterSchema)}}
}

func exec(sql string, args ...func(*harness.Delivery) any) harness.Handler {
	return func(ctx context.Context, d *harness.Delivery) error {
		vals := make([]any, len(args))
		for i, a := range args {
			vals[i] = a(d)
		}
		_, err := d.DB.Exec(ctx, sql, vals...)
		return err
	}
}

func jobID(d *harness.Delivery) any { return d.JobID }

func TestRunFindsIncrement(t *testing.T) {
	job := harness.Job{Name: "hit", Handler: exec(`UPDATE counters SET n = n + 1`)}
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.RunTwice(), faults.ProducerRetry()}
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })

	require.Len(t, res.Scenarios, 2)
	for _, s := range res.Scenarios {
		assert.Equal(t, result.NotIdempotent, s.Verdict, s.Fault)
		require.Len(t, s.StateDiff, 1, s.Fault)
		assert.Equal(t, "counters", s.StateDiff[0].Table)
	}
	kept := 0
	for _, s := range res.Scenarios {
		if s.Database != "" {
			kept++
		}
	}
	assert.Equal(t, 1, kept, "the first failure to finish keeps its database; the others are given back")
	assert.Equal(t, "j1a1w1 > j1a2w2", res.Scenarios[0].Schedule.String())
	assert.Equal(t, "j1a1w1 > j2a1w2", res.Scenarios[1].Schedule.String())
	assert.Equal(t, []string{"twice-job-1", "twice-job-1"}, []string{res.Scenarios[0].Deliveries[0].JobID, res.Scenarios[0].Deliveries[1].JobID})
	assert.Equal(t, 2, res.Scenarios[0].Deliveries[1].Attempt)
	assert.Equal(t, "twice-job-2", res.Scenarios[1].Deliveries[1].JobID)
}

func TestRunLeavesOutVolatileColumns(t *testing.T) {
	job := harness.Job{Name: "event", Handler: exec(`INSERT INTO events (job_id) VALUES ($1) ON CONFLICT DO NOTHING`, jobID)}
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.RunTwice()}
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	assert.Equal(t, []string{"events.created_at", "events.token"}, res.Volatile)
	assert.True(t, res.Idempotent(), "scenarios: %+v", res.Scenarios)
}

// A retry that fails every time (a unique violation on redelivery) leaves
// the state as one run did, but the job never completes: a finding.
func TestRunFindsRetryThatAlwaysFails(t *testing.T) {
	job := harness.Job{Name: "event-strict", Handler: exec(`INSERT INTO events (job_id) VALUES ($1)`, jobID)}
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.RunTwice()}
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })
	require.Len(t, res.Scenarios, 1)
	s := res.Scenarios[0]
	assert.Equal(t, result.NotIdempotent, s.Verdict)
	assert.Empty(t, s.StateDiff)
	assert.Contains(t, s.Deliveries[1].Err, "23505")
	require.Len(t, s.Problems, 1)
	assert.Equal(t, result.DidNotComplete, s.Problems[0].Kind)
}

// Every worker the factory builds is fresh: an in-memory dedup map does not
// survive into the redelivery's worker.
func TestRunBuildsAFreshWorkerPerDelivery(t *testing.T) {
	var built atomic.Int32
	job := harness.Job{Name: "in-memory-dedup", NewWorker: func() harness.Handler {
		built.Add(1)
		seen := map[string]bool{}
		return func(ctx context.Context, d *harness.Delivery) error {
			if seen[d.JobID] {
				return nil
			}
			seen[d.JobID] = true
			_, err := d.DB.Exec(ctx, `UPDATE counters SET n = n + 1`)
			return err
		}
	}}
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.RunTwice()}
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })
	assert.Equal(t, int32(6), built.Load(), "two references and two workers in run-twice, which fails and runs again to confirm it")
	assert.False(t, res.Idempotent(), "an in-memory dedup map is lost with its worker")
}

func TestRunReportsHandlerPanicWithStack(t *testing.T) {
	var calls atomic.Int32
	job := harness.Job{Name: "panics-on-retry", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if calls.Add(1) > 2 && d.Attempt >= 2 { // the queue's retry panics too
			panic("boom")
		}
		return nil
	}}
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.RunTwice()}
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })
	s := res.Scenarios[0]
	assert.Equal(t, result.NotIdempotent, s.Verdict)
	assert.Contains(t, s.Deliveries[1].Err, "handler panicked: boom")
	assert.Contains(t, s.Deliveries[1].Err, "harness_test.go", "the stack names the handler")
	require.Len(t, s.Deliveries, 2, "the panic settles the scenario: the queue does not retry (settled_test.go)")
	assert.Equal(t, result.DidNotComplete, s.Problems[0].Kind)
	assert.Contains(t, s.Problems[0].Detail, "job twice-job-1: delivery j1a2w2 (attempt 2) of schedule j1a1w1 > j1a2w2 (run-twice) panicked, so the scenario stopped there")
}

func TestRunRejectsBadInput(t *testing.T) {
	ok := func(context.Context, *harness.Delivery) error { return nil }
	hit := harness.Job{Name: "hit", Handler: exec(`UPDATE counters SET n = n + 1`)}
	tests := []struct {
		name string
		job  harness.Job
		cfg  harness.Config
		want string
	}{
		{"no name", harness.Job{Handler: ok}, harness.Config{}, "Job.Name is empty"},
		{"no handler", harness.Job{Name: "x"}, harness.Config{}, "neither Handler nor NewWorker"},
		{"both", harness.Job{Name: "x", Handler: ok, NewWorker: func() harness.Handler { return ok }}, harness.Config{}, "sets both"},
		{"nil fault", harness.Job{Name: "x", Handler: ok}, harness.Config{Faults: []faults.Fault{nil}}, "nil fault"},
		{"nil setup func", harness.Job{Name: "x", Handler: ok}, harness.Config{Setup: []harness.Setup{harness.Func(nil)}}, "setup func is nil"},
		{"bad setup SQL", harness.Job{Name: "x", Handler: ok}, harness.Config{Setup: []harness.Setup{harness.SQL("CREATE TABLE t (id int);\nCREATE TABLEX u ();")}}, `SQL:2:8: ERROR: syntax error at or near "TABLEX"`},
		{"fails on a clean run", harness.Job{Name: "x", Handler: func(context.Context, *harness.Delivery) error { return errors.New("no such order") }}, harness.Config{}, "failed on its clean reference run 1"},
		{"empty fault list", hit, withFaults(counterConfig()), "Config.Faults is empty, so no scenario would run"},
		{"no scenario from the faults", harness.Job{Name: "read", Handler: exec(`SELECT n FROM counters`)}, withFaults(counterConfig(), faults.AmbiguousCommits()), `job "read": Config.Faults gave no scenario for its clean run of 1 steps`},
		{"crash past the last step", hit, withFaults(counterConfig(), faults.CrashAt(3)), `j1a1w1!crash:3 acts on step 3, but job "hit" takes 1 step on a clean run`},
		{"a fault its constructor refused", hit, withFaults(counterConfig(), faults.RunTwice(), faults.Redrive(0)), `Config.Faults[1] (redrive): faults.Redrive(0s): a redrive comes after the crash`},
		{"an interleaving cap below one", hit, withFaults(counterConfig(), faults.ConcurrentDelivery(faults.MaxInterleavings(0))), `Config.Faults[0] (concurrent-delivery): faults.MaxInterleavings(0)`},
		{"a name of no default fault", hit, withFaults(counterConfig(), faults.DefaultWithout("redrives")...), `faults.DefaultWithout("redrives"): no fault of the default matrix is named so`},
		{"a redrive before the visibility timeout", hit, withFaults(counterConfig(), faults.Redrive(30*time.Second)), `faults.Redrive(30s): a redrive comes after the queue's visibility timeout (30s)`},
		{"no step", harness.Job{Name: "x", Handler: ok}, counterConfig(), `job "x" took no step, on its clean run or in any scenario`},
		{"unknown table", hit, ignoring(counterConfig(), []string{"counter"}, nil), `IgnoreTables: no table "counter"); its tables are counters, events`},
		{"unknown column", hit, ignoring(counterConfig(), nil, []string{"counters.nn", "tokn", "events.token.x"}), `(IgnoreColumns: no column "counters.nn"; IgnoreColumns: no column "tokn"; IgnoreColumns: no column "events.token.x")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := harness.Run(t.Context(), tt.job, tt.cfg)
			require.Error(t, err)
			assert.True(t, blame.IsUser(err), "error %q is not the user's", err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func withFaults(cfg harness.Config, fs ...faults.Fault) harness.Config {
	cfg.Faults = fs
	if cfg.Faults == nil {
		cfg.Faults = []faults.Fault{}
	}
	return cfg
}

func ignoring(cfg harness.Config, tables, columns []string) harness.Config {
	cfg.IgnoreTables, cfg.IgnoreColumns = tables, columns
	cfg.Faults = []faults.Fault{faults.RunTwice()}
	return cfg
}

// Names that exist are accepted: a table, "table.column", "column", and a
// path inside a jsonb column.
func TestRunAcceptsKnownIgnores(t *testing.T) {
	cfg := harness.Config{
		Setup:         []harness.Setup{harness.SQL(counterSchema + `CREATE TABLE docs (id int PRIMARY KEY, body jsonb);`)},
		Faults:        []faults.Fault{faults.RunTwice()},
		IgnoreTables:  []string{"events"},
		IgnoreColumns: []string{"counters.n", "token", "docs.body.meta.at", "body.x"},
	}
	job := harness.Job{Name: "hit", Handler: exec(`UPDATE counters SET n = n + 1`)}
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })
	assert.Empty(t, res.Failed(), "counters.n is ignored, so the increment passes")
}

func TestCheckFailsWhenExpectedFindingIsGone(t *testing.T) {
	job := harness.Job{Name: "noop", Handler: exec(`UPDATE counters SET n = 1`)}
	cfg := counterConfig()
	cfg.ExpectFinding = "thought to double count"
	rec := recordtb.New(t)
	rec.Run(func(tb testing.TB) { harness.Check(tb, job, cfg) })
	errs := rec.Errors()
	require.Len(t, errs, 1)
	assert.Regexp(t, `^\[twice\] job "noop" is marked not idempotent \(thought to double count\), but all \d+ scenarios passed: remove Config.ExpectFinding$`, errs[0])
}

func TestCheckReportsHarnessBreakageAsFatal(t *testing.T) {
	rec := recordtb.New(t)
	rec.Run(func(tb testing.TB) { harness.Check(tb, harness.Job{Name: "x"}, harness.Config{}) })
	errs := rec.Errors()
	require.Len(t, errs, 1)
	assert.Contains(t, errs[0], "[twice] ")
	assert.NotContains(t, errs[0], "not idempotent")
}

// A comparer that panics is the user's Config breaking the check, not a
// finding about the job nor twice's own breakage: Run returns the user's
// error, naming Config.CmpOptions, and Check fails the test with it
// instead of "not idempotent" (issue 37).
func TestPanickingComparerIsUserError(t *testing.T) {
	job := harness.Job{Name: "hit", Handler: exec(`UPDATE counters SET n = n + 1`)}
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.RunTwice()}
	cfg.CmpOptions = []cmp.Option{cmp.Comparer(func(a, b int64) bool { panic("comparer broke") })}

	res, err := harness.Run(t.Context(), job, cfg)
	require.Error(t, err, "result: %+v", res)
	assert.True(t, strings.HasPrefix(blame.Message(err), `[twice] config: job "hit": an option of Config.CmpOptions made go-cmp panic comparing table "counters"`), "error %q", err)
	assert.Contains(t, err.Error(), "comparer broke")
	assert.NotContains(t, err.Error(), "internal")
	assert.NotContains(t, err.Error(), " Options.CmpOptions")

	rec := recordtb.New(t)
	rec.Run(func(tb testing.TB) { harness.Check(tb, job, cfg) })
	errs := rec.Errors()
	require.Len(t, errs, 1, "errors: %q", errs)
	assert.True(t, strings.HasPrefix(errs[0], "[twice] config: "), "Check failed with %q", errs[0])
	assert.NotContains(t, errs[0], "not idempotent")
}

// An effect the harness cannot record voids the run, even when the
// handler swallows the error: comparing what was recorded would be a
// verdict on an effect log with holes in it.
func TestUnencodableEffectPayloadIsRunError(t *testing.T) {
	job := harness.Job{Name: "sms", Handler: func(ctx context.Context, d *harness.Delivery) error {
		_ = d.Effect(ctx, "sms", "", make(chan int), func(context.Context) error { return nil })
		return nil
	}}
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.RunTwice()}
	_, err := harness.Run(t.Context(), job, cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the payload cannot be encoded as JSON")
}

// The volatile list names only what the comparison could have used: a
// column the user ignored, or one of a table the user ignored, is not
// noise worth reporting.
func TestVolatileLeavesOutIgnored(t *testing.T) {
	job := harness.Job{Name: "log-event", Handler: exec(`INSERT INTO events (job_id) VALUES ($1) ON CONFLICT DO NOTHING`, jobID)}
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.RunTwice()}
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"events.created_at", "events.token"}, res.Volatile)

	cfg.IgnoreColumns = []string{"token"}
	res, err = harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	assert.Equal(t, []string{"events.created_at"}, res.Volatile)

	cfg.IgnoreColumns, cfg.IgnoreTables = nil, []string{"events"}
	res, err = harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	assert.Empty(t, res.Volatile)
}

// -twice.parallel (TWICE_PARALLEL) says how many scenarios run at once;
// junk or a negative number fails the check before it runs anything.
func TestParallelSetting(t *testing.T) {
	var running, most atomic.Int32
	job := harness.Job{Name: "slow", Handler: func(ctx context.Context, d *harness.Delivery) error {
		running.Add(1)
		defer running.Add(-1)
		_, err := d.DB.Exec(ctx, `SELECT pg_sleep(0.02); UPDATE counters SET n = n + 1`)
		if err != nil {
			// A dead delivery's handler may still be on its way out
			// as the redelivery starts: the harness does not wait for
			// it. Only the deliveries whose statement ran are counted,
			// when it has, 20ms after any such straggler entered.
			return err
		}
		n := running.Load()
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		return nil
	}}
	cfg := withFaults(counterConfig(), faults.RunTwice(), faults.ProducerRetry(), faults.CrashBeforeAck(), faults.LostAck(), faults.CrashAtEveryStep())
	cfg.ExpectFinding = "the counter counts every delivery"
	t.Setenv(harness.ParallelEnv, "1")
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	require.GreaterOrEqual(t, len(res.Scenarios), 5)
	assert.Equal(t, int32(1), most.Load(), "with TWICE_PARALLEL=1, deliveries of two scenarios ran at once")

	for _, bad := range []string{"-1", "lots", "1.5"} {
		t.Setenv(harness.ParallelEnv, bad)
		_, err := harness.Run(t.Context(), job, cfg)
		require.Error(t, err, "TWICE_PARALLEL=%s", bad)
		assert.Contains(t, blame.Message(err), `[twice] -twice.parallel or TWICE_PARALLEL is "`+bad+`"; want how many scenarios run at once`)
	}
}

// The two clean runs never overlap, even when scenarios may: side by side
// their now() could fall on the same microsecond, and a column that
// differs on every later run would pass for state (CI saw
// events.created_at equal in both).
func TestCleanRunsRunOneAfterTheOther(t *testing.T) {
	var running, calls, overlapped atomic.Int32
	job := harness.Job{Name: "slow-event", Handler: func(ctx context.Context, d *harness.Delivery) error {
		first := calls.Add(1) <= 2
		if running.Add(1) > 1 && first {
			overlapped.Add(1)
		}
		defer running.Add(-1)
		_, err := d.DB.Exec(ctx, `SELECT pg_sleep(0.05); INSERT INTO events (job_id) VALUES ('x') ON CONFLICT DO NOTHING`)
		return err
	}}
	t.Setenv(harness.ParallelEnv, "2")
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.RunTwice()}
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	assert.Zero(t, overlapped.Load(), "the two clean runs ran side by side")
	assert.Contains(t, res.Volatile, "events.created_at")
}
