package ledger_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twicenats "github.com/runtwice/twice/adapters/nats"
	"github.com/runtwice/twice/adapters/nats/example/ledger"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

var cfg = harness.Config{Setup: []harness.Setup{harness.SQL(ledger.Schema)}}

func spec(consumer jetstream.ConsumerConfig) twicenats.Spec {
	data, _ := json.Marshal(ledger.Credit{Account: 7, Amount: 50})
	return twicenats.Spec{Stream: ledger.Stream, Consumer: consumer, Subject: ledger.Subject, Data: data, MsgID: "credit-9812"}
}

func inbox(d *harness.Delivery) jetstream.MessageHandler    { return ledger.Inbox{DB: d.DB}.Handle }
func ackFirst(d *harness.Delivery) jetstream.MessageHandler { return ledger.AckFirst{DB: d.DB}.Handle }
func checked(d *harness.Delivery) jetstream.MessageHandler  { return ledger.Checked{DB: d.DB}.Handle }

func run(t *testing.T, job harness.Job, c harness.Config) *harness.Result {
	t.Helper()
	res, err := harness.Run(context.Background(), job, c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	return res
}

// verdicts is each fault of the default matrix with whether any of its
// scenarios was not idempotent.
func verdicts(res *harness.Result) map[faults.Name]bool {
	out := map[faults.Name]bool{}
	for _, s := range res.Scenarios {
		out[s.Fault] = out[s.Fault] || s.Verdict != result.Idempotent
	}
	return out
}

func failed(res *harness.Result) []faults.Name {
	var out []faults.Name
	for name, bad := range verdicts(res) {
		if bad {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// The inbox consumer passes every fault of the default matrix: the
// checks a team would write, with no adapter-specific setup.
func TestInbox(t *testing.T) {
	harness.Check(t, twicenats.Job("credit-inbox", spec(ledger.Consumer), inbox), cfg)
}

func TestInboxVerdicts(t *testing.T) {
	res := run(t, twicenats.Job("credit-inbox", spec(ledger.Consumer), inbox), cfg)
	assert.True(t, res.Idempotent(), "%s", res)
	assert.Empty(t, failed(res))
	for _, f := range faults.Default() {
		if f.Name() == faults.NameEffectLostReply || f.Name() == faults.NameEffectSlow || f.Name() == faults.NameEffectFailed {
			continue // the consumer makes no effect call
		}
		assert.Contains(t, verdicts(res), f.Name(), "a scenario of every default fault ran")
	}
}

// The handler acks its message itself, outside the schedule: a second
// delivery handed out while the first handler runs may or may not find
// its answer. The run records that race, so a pass is run again instead
// of resting on which came first.
func TestAnswerBesideFetchIsARace(t *testing.T) {
	sched, err := faults.Parse("j1a1w1 > j1a2w2@1:0 order 1,1,1,1,2,2,2,2")
	require.NoError(t, err)
	c := cfg
	c.Faults = []faults.Fault{faults.Replay(sched)}
	res := run(t, twicenats.Job("credit-inbox", spec(ledger.Consumer), inbox), c)
	require.Len(t, res.Scenarios, 1)
	sc := res.Scenarios[0]
	assert.Contains(t, sc.Races, result.Race{Kind: result.SettledBeside, Delivery: 2, Other: 1}, "%s", res)
	assert.NotNil(t, sc.Rerun, "a scenario that raced runs again")
}

// The inbox passes under harness.Explore too.
func TestInboxExplore(t *testing.T) {
	x := harness.Explore(t, twicenats.Job("credit-inbox", spec(ledger.Consumer), inbox), cfg,
		harness.ExploreOptions{Checks: 5, Dir: t.TempDir()})
	assert.False(t, x.Failed(), "%+v", x)
	assert.Positive(t, x.Executed)
}

// Acking before the write loses the credit when the worker dies at the
// write: the server never delivers the acked message again, and the
// finding says the ack came before the work. A producer
// copy published past the stream's duplicate window is a new message,
// which it credits again (it keeps no inbox). Every other fault passes:
// the server hands an acked message to no one.
func TestAckFirstLosesTheCreditOnACrash(t *testing.T) {
	res := run(t, twicenats.Job("credit-ack-first", spec(ledger.Consumer), ackFirst), cfg)
	assert.Equal(t, []faults.Name{faults.NameCrashMidJob, faults.NameProducerRetryAfterDedup, faults.NameRedrive}, failed(res), "%s", res)
	for _, s := range res.Scenarios {
		if s.Fault != faults.NameCrashMidJob || s.Verdict == result.Idempotent {
			continue
		}
		require.GreaterOrEqual(t, len(s.Deliveries), 2, "%s", s.Schedule)
		assert.Contains(t, s.Deliveries[1].NotDelivered, "acked by delivery 1", "%s", s.Schedule)
		require.NotEmpty(t, s.StateDiff, "%s", s.Schedule)
		assert.Equal(t, "accounts", s.StateDiff[0].Table)
		// The culprit is the ack: the credit was never written, and the
		// server held the message done.
		require.NotEmpty(t, s.Culprits, "%s", s.Schedule)
		assert.Equal(t, result.AckBeforeWork, s.Culprits[0].Pattern, "%s", s.Schedule)
		assert.True(t, s.Deliveries[1].QueueDone, "%s", s.Schedule)
	}
	c := cfg
	c.ExpectFinding = "the ack reaches the server before the credit is written"
	c.ExpectPattern = result.AckBeforeWork
	harness.Check(t, twicenats.Job("credit-ack-first", spec(ledger.Consumer), ackFirst), c)
}

// The kannon bug: with BackOff set, the server redelivers after
// BackOff[0] (10s), not the 5 minutes AckWait says, so the check's
// redelivery comes at +10s while the first credit runs, and both credit.
// Only the overlap is found: every sequential redelivery finds the
// inbox row, and the server never hands one message to two consumers
// before its AckWait.
func TestCheckedWithBackOffCreditsTwice(t *testing.T) {
	job := twicenats.Job("credit-checked", spec(ledger.RetryingConsumer), checked)
	assert.Equal(t, 10*time.Second, job.Queue.Rules().Redeliver, "BackOff[0] overrides AckWait")
	res := run(t, job, cfg)
	assert.Equal(t, []faults.Name{faults.NameVisibilityTimeout}, failed(res), "%s", res)
	found := false
	for _, s := range res.Scenarios {
		if s.Fault != faults.NameVisibilityTimeout || s.Verdict == result.Idempotent {
			continue
		}
		found = true
		require.Len(t, s.Deliveries, 2, "%s", s.Schedule)
		assert.Equal(t, 2, s.Deliveries[1].Attempt, "the server's NumDelivered")
		assert.Equal(t, 10*time.Second, s.Schedule.Deliveries[1].Advance, "%s", s.Schedule)
	}
	assert.True(t, found)
	c := cfg
	c.ExpectFinding = "BackOff[0] (10s) becomes the AckWait, shorter than the credit"
	c.ExpectPattern = result.CheckThenAct
	harness.Check(t, job, c)
}

// The same check gives the same verdict per schedule every time: the
// server's timers are the harness clock's, and an ack's fate is decided
// by what the handler did after it, not by which goroutine ran first.
// The correct job, the inbox consumer, stays quiet on every run. 30 runs
// in the long tests (issue 27: every correct job stays quiet across 30),
// 3 otherwise.
func TestVerdictsRepeat(t *testing.T) {
	repeats := 3
	if harness.Long() {
		repeats = 30
	}
	c := cfg
	c.Faults = []faults.Fault{faults.CrashBeforeAck(), faults.LostAck(), faults.CrashAtEveryStep(), faults.VisibilityTimeout()}
	for _, tc := range []struct {
		job     harness.Job
		correct bool // every verdict is idempotent, on every run
	}{
		{twicenats.Job("credit-inbox", spec(ledger.Consumer), inbox), true},
		{twicenats.Job("credit-ack-first", spec(ledger.Consumer), ackFirst), false},
		{twicenats.Job("credit-checked", spec(ledger.RetryingConsumer), checked), false},
	} {
		var first map[string]result.Verdict
		for i := 1; i <= repeats; i++ {
			res := run(t, tc.job, c)
			got := map[string]result.Verdict{}
			for _, s := range res.Scenarios {
				got[s.Schedule.String()] = s.Verdict
			}
			if tc.correct {
				for sched, v := range got {
					require.Equal(t, result.Idempotent, v, "job %s, run %d of a correct job: %s", tc.job.Name, i, sched)
				}
			}
			if first == nil {
				first = got
				continue
			}
			require.Equal(t, first, got, "job %s, run %d", tc.job.Name, i)
		}
	}
}

func bySequence(d *harness.Delivery) jetstream.MessageHandler {
	return ledger.Inbox{DB: d.DB, BySequence: true}.Handle
}

// An inbox keyed by the stream sequence is correct only while every copy
// of a message comes within the stream's 2-minute duplicate window. The
// default matrix finds the producer's copy past the window; a producer
// that never retries after 30s (Config.ProducerRetriesWithin) makes no
// such copy, and the default matrix passes; an outbox relay that
// publishes again 5 minutes later (faults.ProducerCopyAt) is found all the
// same, while its copy 1 minute later is dropped by the server.
func TestSequenceInboxTrustsTheDuplicateWindow(t *testing.T) {
	job := twicenats.Job("credit-by-sequence", spec(ledger.Consumer), bySequence)
	res := run(t, job, cfg)
	assert.Equal(t, []faults.Name{faults.NameProducerRetryAfterDedup}, failed(res), "%s", res)

	within := cfg
	within.ProducerRetriesWithin = 30 * time.Second
	res = run(t, job, within)
	assert.True(t, res.Idempotent(), "%s", res)
	assert.NotContains(t, verdicts(res), faults.NameProducerRetryAfterDedup, "a producer that retries within 30s makes no copy past the window")

	relay := within
	relay.Faults = []faults.Fault{faults.ProducerCopyAt(time.Minute), faults.ProducerCopyAt(5 * time.Minute)}
	res = run(t, job, relay)
	require.Len(t, res.Scenarios, 2, "%s", res)
	inside, past := res.Scenarios[0], res.Scenarios[1]
	assert.Equal(t, result.Idempotent, inside.Verdict, "%s", inside.Schedule)
	require.Len(t, inside.Deliveries, 2)
	assert.NotEmpty(t, inside.Deliveries[1].NotDelivered, "the copy 1 minute later is inside the window: %s", inside.Schedule)
	assert.Equal(t, result.NotIdempotent, past.Verdict, "the relay's copy 5 minutes later is a new message: %s", past.Schedule)
}

// The producer's own Publish runs for every copy, unchanged: with the
// credit's own ID the stream drops its retries inside the window and the
// inbox the rest, so the default matrix passes; a producer that stamps
// the ID with the time of its publish sends its late retry (5s later)
// under another ID, which neither the window nor the inbox knows.
func TestProducersOwnPublish(t *testing.T) {
	credit := ledger.Credit{Account: 7, Amount: 50}
	job := func(name string, id func(now time.Time) string) harness.Job {
		s := twicenats.Spec{Stream: ledger.Stream, Consumer: ledger.Consumer, Subject: ledger.Subject,
			Publish: func(ctx context.Context, p twicenats.Publishing) error {
				_, err := ledger.Publish(ctx, p.JetStream, id(p.Now()), credit)
				return err
			}}
		return twicenats.Job(name, s, inbox)
	}
	res := run(t, job("credit-own-id", func(time.Time) string { return "credit-9812" }), cfg)
	assert.True(t, res.Idempotent(), "%s", res)
	assert.Contains(t, verdicts(res), faults.NameProducerRetryAfterDedup, "the copy past the window is tried, and the inbox knows its ID")

	res = run(t, job("credit-stamped-id", func(now time.Time) string { return "credit-9812-" + now.Format(time.RFC3339) }), cfg)
	assert.Contains(t, failed(res), faults.NameLateProducerRetry, "%s", res)
	assert.NotContains(t, failed(res), faults.NameProducerRetry, "a retry at the same instant carries the same stamp: %s", res)
}

// The producer's code must publish one message to Spec.Subject, and
// Spec's own message is then left empty.
func TestPublishMisuse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    func(*twicenats.Spec)
		publish func(context.Context, twicenats.Publishing) error
		want    string
	}{
		{"data and code", func(s *twicenats.Spec) { s.Data = []byte(`{}`) }, func(context.Context, twicenats.Publishing) error { return nil },
			"both Spec's Data, Header or MsgID and Spec.Publish say what is published"},
		{"nothing published", nil, func(context.Context, twicenats.Publishing) error { return nil },
			`publish 1 published no message to "ledger.credit"`},
		{"async", nil, func(ctx context.Context, p twicenats.Publishing) error {
			_, err := p.JetStream.PublishAsync(ledger.Subject, nil)
			return err
		}, "Publishing.JetStream takes synchronous publishes only"},
		{"two", nil, func(ctx context.Context, p twicenats.Publishing) error {
			for range 2 {
				if _, err := p.JetStream.Publish(ctx, ledger.Subject, []byte(`{}`)); err != nil {
					return err
				}
			}
			return nil
		}, `published 2 messages to "ledger.credit" in one call`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := twicenats.Spec{Stream: ledger.Stream, Consumer: ledger.Consumer, Subject: ledger.Subject, Publish: tc.publish}
			if tc.spec != nil {
				tc.spec(&s)
			}
			res, err := harness.Run(context.Background(), twicenats.Job("misuse", s, inbox), harness.Config{Setup: cfg.Setup, Faults: []faults.Fault{faults.ProducerRetry()}})
			if res != nil {
				t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
