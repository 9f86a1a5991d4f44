package queuetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
)

// errorf, fatalf and logf report on tb with the tag once, as every
// message of twice's starts.
func errorf(tb testing.TB, format string, args ...any) {
	tb.Helper()
	tb.Error(blame.Line(format, args...))
}

func fatalf(tb testing.TB, format string, args ...any) {
	tb.Helper()
	tb.Fatal(blame.Line(format, args...))
}

func logf(tb testing.TB, format string, args ...any) {
	tb.Helper()
	tb.Log(blame.Line(format, args...))
}

// NewJob builds the adapter's job named name whose production handler
// does what h does, with the delivery the adapter was given: the suite's
// handlers return nil for a success (the adapter acks, as its library
// would) and an error for a failure (the adapter nacks).
type NewJob func(name string, h harness.Handler) harness.Job

// Option says where a queue differs from the rules by design.
type Option interface{ apply(*suite) }

type optionFunc func(*suite)

func (f optionFunc) apply(s *suite) { f(s) }

// AckedByCommit says the queue's ack is the delivery's own commit, made
// by the adapter's handler with the job's work (gue deletes the job in
// the WorkFunc's transaction; watermill-sql moves its offset in the
// handler's): once the handler returned nil the job is complete, so a
// crash before the ack or a lost ack must find it done rather than hand
// it out again.
func AckedByCommit() Option { return optionFunc(func(s *suite) { s.ackedByCommit = true }) }

// suite is one Run: the adapter's job and its differences.
type suite struct {
	newJob        NewJob
	ackedByCommit bool
	// modelled is a job on queue.Model, which the harness runs itself:
	// it keeps no state, so it hands an acked job out again.
	modelled bool
}

// Tables the suite's handlers write; the queue's are its own.
const (
	pointsTable     = "queuetest_points"
	deliveriesTable = "queuetest_deliveries"
)

var setup = []harness.Setup{harness.SQL(`
	CREATE TABLE queuetest_points (id bigint PRIMARY KEY, points int NOT NULL);
	INSERT INTO queuetest_points VALUES (7, 0);
	CREATE TABLE queuetest_deliveries (n bigserial PRIMARY KEY, note text NOT NULL DEFAULT 'handled');`)}

// set is idempotent under every fault.
func set(ctx context.Context, d *harness.Delivery) error {
	_, err := d.DB.Exec(ctx, `UPDATE queuetest_points SET points = 50 WHERE id = 7`)
	return err
}

// add writes a row per delivery, then sets: a second delivery is a
// finding, and so is a crash before the second step.
func add(ctx context.Context, d *harness.Delivery) error {
	if _, err := d.DB.Exec(ctx, `INSERT INTO queuetest_deliveries DEFAULT VALUES`); err != nil {
		return err
	}
	return set(ctx, d)
}

var errRedelivery = errors.New("queuetest: a redelivery fails on purpose")

// failRedelivery sets, but a redelivery then fails: a clean run must not
// fail, so the suite makes its failure after a crash. It takes its step
// first, as a handler that fails does, so the failure is the queue's to
// read (a JetStream handler Naks and returns nothing).
func failRedelivery(ctx context.Context, d *harness.Delivery) error {
	if err := set(ctx, d); err != nil {
		return err
	}
	if d.Kind == queue.DeliveryRedelivery {
		return errRedelivery
	}
	return nil
}

// rule is one promise of queue.Queue, checked on the job newJob builds.
type rule struct {
	name  string
	check func(t testing.TB, s *suite)
}

var rules = []rule{
	{"schema", checkSchema},
	{"ack-completes", checkAckCompletes},
	{"crash-redelivers", checkCrashRedelivers},
	{"withheld-ack", checkWithheldAck},
	{"failure-retries", checkFailureRetries},
	{"producer-copy", checkProducerCopy},
	{"fresh-storage", checkFreshStorage},
	{"check-and-explore", checkCheckAndExplore},
}

// Run checks the queue of the jobs newJob builds against every rule, one
// subtest a rule. The subtests run one after another: each runs checks of
// its own, which already run their scenarios side by side. A job on
// queue.Model (or on no queue) is held to the model's own promise
// instead of ack-completes: it hands an acked job out again.
func Run(t *testing.T, newJob NewJob, opts ...Option) {
	t.Helper()
	if newJob == nil {
		fatalf(t, "queuetest.Run: newJob is nil")
	}
	s := &suite{newJob: newJob}
	for _, o := range opts {
		o.apply(s)
	}
	switch newJob("queuetest", set).Queue.(type) {
	case nil, queue.Model:
		s.modelled = true
	}
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) { r.check(t, s) })
	}
}

// run checks the job h makes under fs and fails t if the check could not
// run. The databases of its failed scenarios are dropped when t passes,
// and kept and named when it fails.
func (s *suite) run(t testing.TB, name string, h harness.Handler, fs ...faults.Fault) (*harness.Result, queue.Rules) {
	t.Helper()
	job := s.newJob("queuetest-"+name, h)
	rules := queue.Model{}.Rules()
	if job.Queue != nil {
		rules = job.Queue.Rules()
	}
	res, err := harness.Run(context.Background(), job, harness.Config{Setup: setup, Faults: fs})
	if res != nil {
		t.Cleanup(func() {
			if !t.Failed() {
				_ = res.DropDatabases(context.Background())
				return
			}
			for _, sc := range res.Scenarios {
				if sc.Database != "" {
					logf(t, "kept the database of %s: %s", sc.Schedule, sc.Database)
				}
			}
		})
	}
	if err != nil {
		fatalf(t, "queuetest: %s: %v", name, err)
	}
	if len(res.Scenarios) == 0 {
		fatalf(t, "queuetest: %s: no scenario ran", name)
	}
	return res, rules
}

// second is the scenario's second delivery, or fails t.
func second(t testing.TB, sc result.Scenario) result.DeliveryOutcome {
	t.Helper()
	if len(sc.Deliveries) < 2 {
		fatalf(t, "%s (%s): %d deliveries, want 2", sc.Fault, sc.Schedule, len(sc.Deliveries))
	}
	return sc.Deliveries[1]
}

func checkSchema(t testing.TB, s *suite) {
	t.Helper()
	if q := s.newJob("queuetest-schema", set).Queue; q != nil {
		if sch := q.Schema(); sch.Apply != nil && sch.Name == "" {
			errorf(t, "Schema has an Apply and no Name: the Name keys the template database")
		}
	}
	res, rules := s.run(t, "schema", set, faults.RunTwice())
	if !res.Idempotent() {
		errorf(t, "setting a value is idempotent, but: %s", res)
	}
	for _, tb := range res.Reference.Tables {
		switch {
		case tb.Name == pointsTable || tb.Name == deliveriesTable:
		case tb.Name == rules.JobTable && len(tb.Rows) == 0:
		case tb.Name == rules.JobTable:
			errorf(t, "the job table %s holds %d rows of the job's, want them left out (Rules.JobIDColumn %q)", tb.Name, len(tb.Rows), rules.JobIDColumn)
		default:
			errorf(t, "table %s is compared: a queue's own tables belong in Rules.Tables", tb.Name)
		}
	}
}

func checkAckCompletes(t testing.TB, s *suite) {
	t.Helper()
	res, _ := s.run(t, "ack", add, faults.RunTwice())
	for _, sc := range res.Scenarios {
		d2 := second(t, sc)
		switch {
		case s.modelled && d2.NotDelivered != "":
			errorf(t, "%s: the acked job was not handed out again (%s), but queue.Model hands out every delivery", sc.Schedule, d2.NotDelivered)
		case !s.modelled && d2.NotDelivered == "":
			errorf(t, "%s: the acked job was handed out again (attempt %d, %s)", sc.Schedule, d2.Attempt, d2.Kind)
		case !s.modelled && !d2.QueueDone:
			errorf(t, "%s: the acked job was refused (%s) but not held done: want Fetched.Done", sc.Schedule, d2.NotDelivered)
		}
	}
}

// redelivered requires that sc's second delivery handed the job out
// again under the same ID, with a higher attempt.
func redelivered(t testing.TB, sc result.Scenario) bool {
	t.Helper()
	d1, d2 := sc.Deliveries[0], second(t, sc)
	if d2.NotDelivered != "" {
		errorf(t, "%s: the job was not handed out again: %s", sc.Schedule, d2.NotDelivered)
		return false
	}
	if d2.JobID != d1.JobID {
		errorf(t, "%s: the redelivery's JobID = %q, want the first delivery's %q", sc.Schedule, d2.JobID, d1.JobID)
	}
	if d2.Attempt <= d1.Attempt {
		errorf(t, "%s: the redelivery's Attempt = %d, want more than %d", sc.Schedule, d2.Attempt, d1.Attempt)
	}
	return true
}

// checkCrashRedelivers crashes the first delivery before each of its
// steps: its ack is never made, so the job comes back, and where the crash
// fell after the first write the second delivery writes again.
func checkCrashRedelivers(t testing.TB, s *suite) {
	t.Helper()
	res, _ := s.run(t, "crash", add, faults.CrashAtEveryStep())
	found := false
	for _, sc := range res.Scenarios {
		if redelivered(t, sc) && sc.Verdict == result.NotIdempotent {
			found = true
		}
	}
	if !found {
		errorf(t, "no crash made a redelivery write twice: %s", res)
	}
}

// checkWithheldAck crashes the worker after the handler returned nil, and
// loses the ack of one that returned nil: the job comes back (or, with
// AckedByCommit, the handler's commit completed it).
func checkWithheldAck(t testing.TB, s *suite) {
	t.Helper()
	res, _ := s.run(t, "withheld-ack", add, faults.CrashBeforeAck(), faults.LostAck())
	for _, sc := range res.Scenarios {
		if !s.ackedByCommit {
			if redelivered(t, sc) && sc.Verdict != result.NotIdempotent {
				errorf(t, "%s: verdict %s, want %s: the redelivery adds a row", sc.Schedule, sc.Verdict, result.NotIdempotent)
			}
			continue
		}
		if d2 := second(t, sc); d2.NotDelivered == "" || !d2.QueueDone {
			errorf(t, "%s: the job was handed out again (attempt %d) or not held done (%q), but AckedByCommit says the handler's commit completed it",
				sc.Schedule, d2.Attempt, d2.NotDelivered)
		}
	}
}

func checkFailureRetries(t testing.TB, s *suite) {
	t.Helper()
	res, _ := s.run(t, "retry", failRedelivery, faults.CrashAt(1))
	if !res.Idempotent() {
		errorf(t, "setting a value after a failed attempt is idempotent, but: %s", res)
	}
	for _, sc := range res.Scenarios {
		// The handler failed the redelivery; the adapter nacked it (a
		// returned error, or a JetStream Nak that returns nothing). The
		// harness's model names no kinds.
		failed := slices.IndexFunc(sc.Deliveries, func(d result.DeliveryOutcome) bool {
			return d.NotDelivered == "" && (d.Kind == queue.DeliveryRedelivery || d.Err != "")
		})
		if failed < 0 {
			errorf(t, "%s: the job was not handed out again after the crash: %s", sc.Schedule, deliveries(sc))
			continue
		}
		retried := slices.ContainsFunc(sc.Deliveries[failed+1:], func(d result.DeliveryOutcome) bool {
			return d.NotDelivered == "" && d.Err == "" && d.Kind != queue.DeliveryRedelivery && d.Attempt > sc.Deliveries[failed].Attempt
		})
		if !retried {
			errorf(t, "%s: after attempt %d failed, the job was not handed out again: %s",
				sc.Schedule, sc.Deliveries[failed].Attempt, deliveries(sc))
		}
	}
}

func checkProducerCopy(t testing.TB, s *suite) {
	t.Helper()
	res, rules := s.run(t, "copy", add, faults.ProducerRetry())
	for _, sc := range res.Scenarios {
		d1, d2 := sc.Deliveries[0], second(t, sc)
		// A copy the queue does not refuse runs; it may run in the
		// delivery that was handed it or beside the original (a
		// watermill-sql subscriber takes every message it finds).
		if rules.Dedup == 0 && sc.Verdict != result.NotIdempotent {
			errorf(t, "%s: verdict %s, want %s: Rules.Dedup says the queue refuses no copy, so the copy writes again (%s)",
				sc.Schedule, sc.Verdict, result.NotIdempotent, deliveries(sc))
		}
		switch {
		case d2.NotDelivered != "":
		case d2.JobID == d1.JobID:
			errorf(t, "%s: the producer's copy has the original's JobID %q, want one of its own", sc.Schedule, d1.JobID)
		case d2.Attempt != 1:
			errorf(t, "%s: the producer's copy is Attempt %d, want 1", sc.Schedule, d2.Attempt)
		}
	}
}

func checkFreshStorage(t testing.TB, s *suite) {
	t.Helper()
	res, _ := s.run(t, "fresh", add, faults.RunTwice(), faults.CrashBeforeAck(), faults.ProducerRetry(), faults.LostAck())
	for _, sc := range res.Scenarios {
		d1 := sc.Deliveries[0]
		if d1.NotDelivered != "" || d1.Attempt != 1 {
			errorf(t, "%s: the first delivery of a fresh scenario is attempt %d (%q), want attempt 1, delivered", sc.Schedule, d1.Attempt, d1.NotDelivered)
		}
	}
}

func checkCheckAndExplore(t testing.TB, s *suite) {
	t.Helper()
	cfg := harness.Config{Setup: setup}
	harness.Check(t, s.newJob("queuetest-check", set), cfg)
	x := harness.Explore(t, s.newJob("queuetest-explore", set), cfg, harness.ExploreOptions{Checks: 5, Dir: t.TempDir()})
	if x.Failed() || x.Executed == 0 {
		errorf(t, "exploring an idempotent job: failed %v after %d schedules", x.Failed(), x.Executed)
	}
}

// deliveries lists a scenario's deliveries for a message.
func deliveries(sc result.Scenario) string {
	var out []string
	for i, d := range sc.Deliveries {
		what := "ok"
		switch {
		case d.NotDelivered != "":
			what = "not delivered: " + d.NotDelivered
		case d.Err != "":
			what = "error: " + d.Err
		}
		out = append(out, fmt.Sprintf("d%d attempt %d %s", i+1, d.Attempt, what))
	}
	return fmt.Sprint(out)
}
