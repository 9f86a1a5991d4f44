package orders_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twicewatermill "github.com/runtwice/twice/adapters/watermill"
	"github.com/runtwice/twice/adapters/watermill/example/orders"
	twiceassert "github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

var placed = mustJSON(orders.OrderPlaced{OrderID: 9812})

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// courier sends every booking through the delivery's effect recorder.
type courier struct{ d *harness.Delivery }

func (c courier) Book(ctx context.Context, orderID int64) error {
	return c.d.Effect(ctx, "courier", strconv.FormatInt(orderID, 10), map[string]int64{"order_id": orderID},
		func(context.Context) error { return nil })
}

func handler(inbox bool) func(*harness.Delivery) message.HandlerFunc {
	return func(d *harness.Delivery) message.HandlerFunc {
		return orders.Handler{DB: d.DB, Courier: courier{d}, Inbox: inbox}.Handle
	}
}

// deduplicator is Watermill's Deduplicator with its defaults: a payload
// hash kept a minute in memory, in a map made when the router builds the
// handler's middleware, so one per process.
func deduplicator() message.HandlerMiddleware {
	return (&middleware.Deduplicator{}).Middleware
}

func config(c harness.Config) harness.Config {
	c.Setup = []harness.Setup{harness.SQL(orders.Schema)}
	if c.EffectPolicies == nil {
		c.EffectPolicies = map[string]twiceassert.Policy{
			twicewatermill.EffectKind: twiceassert.Repeatable,
			"courier":                 twiceassert.AtLeastOnce,
		}
	}
	return c
}

func run(t *testing.T, job harness.Job, c harness.Config) *harness.Result {
	t.Helper()
	res, err := harness.Run(context.Background(), job, config(c))
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	return res
}

// verdicts maps each scenario's schedule to its verdict.
func verdicts(res *harness.Result) map[string]result.Verdict {
	out := map[string]result.Verdict{}
	for _, s := range res.Scenarios {
		out[s.Schedule.String()] = s.Verdict
	}
	return out
}

// The inbox, keyed by the message's UUID in the points transaction, makes
// the handler idempotent under every redelivery of the same message.
func TestInboxHandler(t *testing.T) {
	harness.Check(t, twicewatermill.Job("award-points", placed, nil, handler(true)),
		config(harness.Config{Faults: faults.DefaultWithout(faults.NameProducerRetry, faults.NameConcurrentProducerRetry)}))
}

// A producer's retry publishes the payload again under a new UUID, which
// the inbox has never seen: the points are awarded twice.
func TestInboxHandlerProducerRetry(t *testing.T) {
	res := run(t, twicewatermill.Job("award-points", placed, nil, handler(true)),
		harness.Config{Faults: []faults.Fault{faults.ProducerRetry()}})
	require.Len(t, res.Scenarios, 1)
	s := res.Scenarios[0]
	assert.Equal(t, result.NotIdempotent, s.Verdict, "%s", res)
	require.Len(t, s.Deliveries, 2)
	assert.NotEqual(t, s.Deliveries[0].JobID, s.Deliveries[1].JobID)
}

// Behind Watermill's in-memory Deduplicator, the handler is safe only
// while the process that saw the message lives: a lost ack redelivered to
// the same process is skipped, but after a crash, or on another process,
// the dedup memory is gone and the points are awarded again.
func TestDeduplicatorAfterCrash(t *testing.T) {
	res := run(t, twicewatermill.Job("award-points", placed, nil, handler(false), twicewatermill.Middleware(deduplicator)),
		harness.Config{Faults: []faults.Fault{faults.CrashBeforeAck(), faults.LostAck()}})
	got := verdicts(res)
	assert.Equal(t, map[string]result.Verdict{
		"j1a1w1!crash > +30s j1a2w2":   result.NotIdempotent,
		"j1a1w1!lostack > +30s j1a2w1": result.Idempotent,
		"j1a1w1!lostack > +30s j1a2w2": result.NotIdempotent,
	}, got, "%s", res)
}

// When a delivery fails (the courier refuses the booking, or publishing
// PointsAwarded fails), the subscriber nacks and resends the message to
// the same process. In front of the inbox handler, which is idempotent on
// its own, the Deduplicator remembered the message on the failed try and
// skips the resend: the courier, the points or PointsAwarded are missing.
// Without it, the resend does the work.
func TestDeduplicatorAfterFailedDelivery(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []twicewatermill.Option
		verdict result.Verdict
	}{
		{"deduplicator", []twicewatermill.Option{twicewatermill.Middleware(deduplicator)}, result.NotIdempotent},
		{"none", nil, result.Idempotent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, twicewatermill.Job("award-points", placed, nil, handler(true), tc.opts...),
				harness.Config{Faults: []faults.Fault{faults.EffectFailures()}})
			require.NotEmpty(t, res.Scenarios)
			for _, s := range res.Scenarios {
				assert.Equal(t, tc.verdict, s.Verdict, "%s: %s", s.Schedule, res)
			}
		})
	}
}

// The messages the handler returns are published before the ack, as
// effects: a lost ack publishes PointsAwarded again, which is a finding
// when messages must be published exactly once, and fine when republishing
// is harmless.
func TestPublishedMessagesAreEffects(t *testing.T) {
	job := twicewatermill.Job("award-points", placed, nil, handler(true), twicewatermill.PublishTopic("points"))
	exact := run(t, job, harness.Config{
		Faults:         []faults.Fault{faults.LostAck()},
		EffectPolicies: map[string]twiceassert.Policy{"courier": twiceassert.AtLeastOnce},
	})
	var published []string
	for _, e := range exact.ReferenceEffects {
		if e.Kind == twicewatermill.EffectKind {
			published = append(published, string(e.Payload))
		}
	}
	assert.Equal(t, []string{`{"topic":"points","payload":"{\"order_id\":9812,\"points\":50}"}`}, published)
	require.NotEmpty(t, exact.Scenarios)
	for _, s := range exact.Scenarios {
		assert.Equal(t, result.NotIdempotent, s.Verdict, "%s: %s", s.Schedule, exact)
		require.NotNil(t, s.EffectDiff, "%s", s.Schedule)
		assert.Empty(t, s.StateDiff, "%s", s.Schedule)
	}

	repeatable := run(t, job, harness.Config{Faults: []faults.Fault{faults.LostAck()}})
	assert.Empty(t, repeatable.Failed(), "%s", repeatable)
}

// A handler that panics is recovered by Watermill's router, which nacks
// the message: the subscriber resends it to the same process, Redeliveries
// times, and only then does the delivery fail, with a message naming the
// job, the message and the delivery; with no clean run, the check ends.
func TestPanickingHandler(t *testing.T) {
	job := twicewatermill.Job("award-points", placed, nil, func(*harness.Delivery) message.HandlerFunc {
		return func(*message.Message) ([]*message.Message, error) { panic("no database") }
	})
	_, err := harness.Run(context.Background(), job, config(harness.Config{Faults: []faults.Fault{faults.RunTwice()}}))
	require.Error(t, err, "a handler that panics on every delivery has no clean run to compare with")
	assert.Contains(t, err.Error(), `job "award-points" failed on its clean reference run 1`)
	assert.Contains(t, err.Error(), `job "award-points": the handler panicked on message `+twicewatermill.MessageUUID("award-points", "1")+
		` of job 1 (attempt 1, first, try 4 in this process): no database`)
	assert.Contains(t, err.Error(), "Watermill's router recovered the panic and nacked the message")
}
