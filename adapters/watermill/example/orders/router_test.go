package orders_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twicewatermill "github.com/runtwice/twice/adapters/watermill"
	"github.com/runtwice/twice/adapters/watermill/example/orders"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// panickyCourier is a courier client that panics on a failed booking, as
// one that reads the body of a response it did not get does.
type panickyCourier struct{ d *harness.Delivery }

func (c panickyCourier) Book(ctx context.Context, orderID int64) error {
	if err := courier(c).Book(ctx, orderID); err != nil {
		panic(fmt.Sprintf("courier: no response body: %v", err))
	}
	return nil
}

// Watermill's router recovers a panic and nacks the message, and the
// subscriber resends it to the same process, whose in-memory Deduplicator
// remembered it on the try that panicked: the resend is dropped and the
// order's courier and points are never done. Without the Deduplicator the
// resend does the work. (A model in which a panic ends the process sends
// the message to a fresh process with an empty Deduplicator, and finds
// nothing.)
func TestPanicBehindDeduplicator(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []twicewatermill.Option
		verdict result.Verdict
	}{
		{"deduplicator", []twicewatermill.Option{twicewatermill.Middleware(deduplicator)}, result.NotIdempotent},
		{"none", nil, result.Idempotent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, twicewatermill.Job("award-points", placed, nil, func(d *harness.Delivery) message.HandlerFunc {
				return orders.Handler{DB: d.DB, Courier: panickyCourier{d}, Inbox: true}.Handle
			}, tc.opts...), harness.Config{Faults: []faults.Fault{faults.EffectFailures()}})
			require.NotEmpty(t, res.Scenarios)
			var tables []string
			for _, s := range res.Scenarios {
				assert.Equal(t, tc.verdict, s.Verdict, "%s: %s", s.Schedule, res)
				for _, d := range s.StateDiff {
					tables = append(tables, d.Table)
				}
			}
			if tc.verdict == result.NotIdempotent {
				assert.Contains(t, tables, "accounts", "the points the dropped resend never awarded: %s", res)
			}
		})
	}
}

// workerCourier books through the delivery the worker runs at the time:
// the courier of a handler built once per process.
type workerCourier struct{ w *twicewatermill.Worker }

func (c workerCourier) Book(ctx context.Context, orderID int64) error {
	return courier{c.w.Delivery()}.Book(ctx, orderID)
}

func awarder(inbox bool) func(w *twicewatermill.Worker) cqrs.EventHandler {
	return func(w *twicewatermill.Worker) cqrs.EventHandler {
		return orders.NewPointsAwarder(w.DB, workerCourier{w}, inbox)
	}
}

// The production cqrs.EventHandler and processor config, checked with no
// glue: the adapter runs Watermill's EventProcessor on the worker's
// router, which checks the event's name, puts the original message in the
// context and unmarshals the event; the handler is built once per process
// on the worker's pool. With its inbox it passes every fault but a
// producer's retry (a new UUID); without, a crash or a lost ack awards the
// points twice.
func TestEventHandler(t *testing.T) {
	event := orders.OrderPlaced{OrderID: 9812}
	t.Run("inbox", func(t *testing.T) {
		harness.Check(t, twicewatermill.EventJob("award-points-event", event, orders.ProcessorConfig(), awarder(true)),
			config(harness.Config{Faults: faults.DefaultWithout(faults.NameProducerRetry, faults.NameConcurrentProducerRetry)}))
	})
	t.Run("no inbox", func(t *testing.T) {
		res := run(t, twicewatermill.EventJob("award-points-event", event, orders.ProcessorConfig(), awarder(false)),
			harness.Config{Faults: []faults.Fault{faults.CrashBeforeAck(), faults.LostAck()}})
		got := verdicts(res)
		assert.Equal(t, map[string]result.Verdict{
			"j1a1w1!crash > +30s j1a2w2":   result.NotIdempotent,
			"j1a1w1!lostack > +30s j1a2w1": result.NotIdempotent,
			"j1a1w1!lostack > +30s j1a2w2": result.NotIdempotent,
		}, got, "%s", res)
	})
}

// The processor's own checks run: an event of another type is nacked
// (AckOnUnknownEvent off), so the handler never runs and the check has no
// clean run, and says what the processor said.
func TestEventHandlerUnknownEvent(t *testing.T) {
	type OrderCancelled struct{ OrderID int64 }
	_, err := harness.Run(context.Background(), twicewatermill.EventJob("award-points-event", OrderCancelled{9812}, orders.ProcessorConfig(), awarder(true)),
		config(harness.Config{Faults: []faults.Fault{faults.RunTwice()}}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "was nacked before the handler ran: received unexpected event type OrderCancelled, expected OrderPlaced")
}

// strictInbox is a handler that records the message in its inbox with a
// plain insert: a second copy fails on the inbox's key and is nacked.
func strictInbox(d *harness.Delivery) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		if _, err := d.DB.Exec(ctx, `INSERT INTO processed_messages VALUES ($1)`, msg.UUID); err != nil {
			return nil, err
		}
		_, err := d.DB.Exec(ctx, `UPDATE accounts SET points = points + 50 WHERE id = 1`)
		return nil, err
	}
}

// Two overlapping deliveries of one message each settle as the broker
// settles them: the copy that fails on the inbox's key is nacked and
// handed out again, where it fails again, so the message never settles
// (a poison message), though the other copy was acked. A broker that
// counted the message done once either copy acked would forget the
// failing one and pass the handler.
func TestOverlappingCopiesSettleEach(t *testing.T) {
	res := run(t, twicewatermill.Job("award-points", placed, nil, strictInbox, twicewatermill.Redeliveries(0)),
		harness.Config{Faults: []faults.Fault{faults.ConcurrentDelivery()}})
	require.NotEmpty(t, res.Scenarios)
	failed := 0
	for _, s := range res.Scenarios {
		if s.Verdict != result.Idempotent {
			failed++
		}
	}
	assert.Positive(t, failed, "%s", res)
}

// keyTable is an ExpiringKeyRepository on a table, as a service shares
// Deduplicator keys across its processes.
type keyTable struct{ db *pgxpool.Pool }

func (k keyTable) IsDuplicate(ctx context.Context, key string) (bool, error) {
	tag, err := k.db.Exec(ctx, `INSERT INTO processed_messages VALUES ($1) ON CONFLICT DO NOTHING`, key)
	return tag.RowsAffected() == 0, err
}

// A database-backed middleware is built once per worker process on the
// process's own pool, and its statements are the delivery's steps: a
// Deduplicator whose keys live in a table, committed before the handler
// runs, drops the redelivery after a crash mid-job, and the points are
// never awarded.
func TestWorkerMiddlewareOnTheWorkersPool(t *testing.T) {
	var built atomic.Int32
	dedup := func(w *twicewatermill.Worker) message.HandlerMiddleware {
		built.Add(1)
		return (&middleware.Deduplicator{Repository: keyTable{w.DB}, Timeout: 10 * time.Second, KeyFactory: func(msg *message.Message) (string, error) { return msg.UUID, nil }}).Middleware
	}
	job := twicewatermill.Job("award-points", placed, nil, handler(false), twicewatermill.WorkerMiddleware(dedup))

	lost := run(t, job, harness.Config{Faults: []faults.Fault{faults.LostAck()}})
	assert.Empty(t, lost.Failed(), "the key table drops a lost ack's redelivery, to either process: %s", lost)
	// Two clean runs (one process each) and lost-ack's two scenarios
	// (one process, then two).
	assert.Equal(t, int32(5), built.Load(), "the middleware is built once per process")

	crash := run(t, job, harness.Config{Faults: []faults.Fault{faults.CrashAtEveryStep()}})
	var found []string
	for _, s := range crash.Scenarios {
		if s.Verdict == result.NotIdempotent {
			found = append(found, s.Schedule.String())
		}
	}
	assert.NotEmpty(t, found, "a crash after the key's insert loses the points: %s", crash)
}

// flaky fails its first two calls in each delivery, as a handler whose
// database is briefly away does, then awards the points.
func flaky(d *harness.Delivery) message.HandlerFunc {
	calls := 0
	h := orders.Handler{DB: d.DB, Courier: courier{d}, Inbox: true}.Handle
	return func(msg *message.Message) ([]*message.Message, error) {
		if calls++; calls <= 2 {
			return nil, fmt.Errorf("database briefly away (call %d)", calls)
		}
		return h(msg)
	}
}

// Watermill's Retry middleware at production intervals (100ms to 1s, 10
// retries) runs with its sleeps shortened, and every delivery's Settled
// says so; its hooks see the configured delays.
func TestRetryAtProductionIntervals(t *testing.T) {
	var mu sync.Mutex
	var delays []time.Duration
	retry := middleware.Retry{MaxRetries: 10, InitialInterval: 100 * time.Millisecond, MaxInterval: time.Second, Multiplier: 2,
		OnRetryHook: func(_ int, delay time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			delays = append(delays, delay)
		}}
	res := run(t, twicewatermill.Job("award-points", placed, nil, flaky, twicewatermill.Retry(retry)),
		harness.Config{Faults: []faults.Fault{faults.CrashBeforeAck(), faults.LostAck()}})
	assert.Empty(t, res.Failed(), "%s", res)
	require.NotEmpty(t, res.Scenarios)
	for _, s := range res.Scenarios {
		settled := 0
		for _, d := range s.Deliveries {
			if d.Settled != "" {
				settled++
				assert.Contains(t, d.Settled, "Watermill's Retry middleware (10 retries, 100ms to 1s) slept "+strconv.Itoa(twicewatermill.RetrySpeedup)+"x shorter than configured", "%s", s.Schedule)
			}
		}
		assert.Positive(t, settled, "%s", s.Schedule)
	}
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, delays)
	for _, d := range delays {
		assert.True(t, d >= 100*time.Millisecond && d <= time.Second, "the hook sees the configured delays, not the shortened ones: %v", delays)
	}
}

// A producer that stamps each publish and derives the UUID from the order
// (as a service that lets its broker dedup by message ID does) is checked
// as it publishes: with the broker's message-ID dedup its retry is dropped,
// and the points are awarded once; without, the retry is a second message
// and the handler, which trusts the broker, awards them twice.
func TestProducerCopiesBuiltPerPublish(t *testing.T) {
	var stamps sync.Map
	producer := twicewatermill.Producer(func(n int, now time.Time) (*message.Message, error) {
		stamps.Store(n, now)
		msg := message.NewMessage("order-placed-9812", mustJSON(map[string]any{"order_id": 9812, "requested_at": now}))
		return msg, nil
	})
	for _, tc := range []struct {
		name    string
		opts    []twicewatermill.Option
		verdict result.Verdict
	}{
		{"broker dedup", []twicewatermill.Option{producer, twicewatermill.BrokerDedup(2 * time.Minute)}, result.Idempotent},
		{"none", []twicewatermill.Option{producer}, result.NotIdempotent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := twicewatermill.Job("award-points", nil, nil, handler(false), tc.opts...)
			res := run(t, job, harness.Config{Faults: []faults.Fault{faults.ProducerRetry()}})
			require.Len(t, res.Scenarios, 1)
			assert.Equal(t, tc.verdict, res.Scenarios[0].Verdict, "%s", res)
		})
	}
	_, ok := stamps.Load(2)
	assert.True(t, ok, "the producer built the copy itself")
	job := twicewatermill.Job("award-points", nil, nil, handler(false), producer, twicewatermill.BrokerDedup(2*time.Minute))
	assert.Equal(t, 2*time.Minute, job.Queue.Rules().Dedup, "the broker's window is the queue's dedup rule")
}

// AwardPoints is a command for the cqrs.CommandHandler check.
type AwardPoints struct {
	OrderID int64 `json:"order_id"`
}

// A cqrs.CommandHandler is checked as Watermill's CommandProcessor runs
// it, with the production config: a handler that adds the points without
// an inbox awards them twice when its process dies before the ack.
func TestCommandHandler(t *testing.T) {
	cfg := cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) {
			return "commands." + p.CommandName, nil
		},
		Marshaler: cqrs.JSONMarshaler{GenerateName: cqrs.StructName},
	}
	job := twicewatermill.CommandJob("award-points-command", AwardPoints{OrderID: 9812}, cfg, func(w *twicewatermill.Worker) cqrs.CommandHandler {
		return cqrs.NewCommandHandler("AwardPoints", func(ctx context.Context, cmd *AwardPoints) error {
			_, err := w.DB.Exec(ctx, `UPDATE accounts SET points = points + (SELECT points FROM orders WHERE id = $1) WHERE id = (SELECT account_id FROM orders WHERE id = $1)`, cmd.OrderID)
			return err
		})
	})
	res := run(t, job, harness.Config{Faults: []faults.Fault{faults.CrashBeforeAck(), faults.RunTwice()}})
	assert.Equal(t, map[string]result.Verdict{
		"j1a1w1!crash > +30s j1a2w2": result.NotIdempotent,
		"j1a1w1 > j1a2w2":            result.Idempotent,
	}, verdicts(res), "%s", res)
}

// A broker that dedups message UUIDs within a window drops a producer's
// copy that comes after the message was handled but inside the window,
// and takes one that comes after it: the default matrix has both late
// copies for such a broker, and only the one past the window awards
// again.
func TestLateCopiesAroundTheBrokersWindow(t *testing.T) {
	producer := twicewatermill.Producer(func(int, time.Time) (*message.Message, error) {
		return message.NewMessage("order-placed-9812", mustJSON(map[string]any{"order_id": 9812})), nil
	})
	job := twicewatermill.Job("award-points", nil, nil, handler(false), producer, twicewatermill.BrokerDedup(2*time.Minute))
	res := run(t, job, harness.Config{})
	byFault := map[faults.Name][]result.Scenario{}
	for _, s := range res.Scenarios {
		byFault[s.Fault] = append(byFault[s.Fault], s)
	}
	require.NotEmpty(t, byFault[faults.NameLateProducerRetry], "the default matrix has a late copy: %s", res)
	require.NotEmpty(t, byFault[faults.NameProducerRetryAfterDedup], "and one past the broker's window: %s", res)
	for _, s := range byFault[faults.NameLateProducerRetry] {
		assert.Equal(t, result.Idempotent, s.Verdict, "%s: inside the window the broker drops the copy", s.Schedule)
	}
	for _, s := range byFault[faults.NameProducerRetryAfterDedup] {
		assert.Equal(t, result.NotIdempotent, s.Verdict, "%s: past the window the copy is a new message", s.Schedule)
	}
}

// The order service's own publish code runs for every copy, at the
// copy's time: with a UUID keyed by the order and a broker that drops a
// repeated message ID, its retry is dropped and the points are awarded
// once; with watermill.NewUUID() per publish, as most services publish,
// the retry is a new message, awarded again.
func TestProducersOwnPublishCode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		keyed   bool
		verdict result.Verdict
	}{
		{"keyed UUID", true, result.Idempotent},
		{"new UUID per publish", false, result.NotIdempotent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var copies sync.Map
			publish := twicewatermill.Publish(func(ctx context.Context, p twicewatermill.Publishing) error {
				copies.Store(p.Copy, true)
				return orders.Placing{Pub: p.Publisher, Now: p.Now, KeyedUUID: tc.keyed}.Placed(ctx, 9812)
			})
			job := twicewatermill.Job("award-points", nil, nil, handler(false), publish, twicewatermill.BrokerDedup(2*time.Minute))
			res := run(t, job, harness.Config{Faults: []faults.Fault{faults.ProducerRetry()}})
			require.Len(t, res.Scenarios, 1)
			assert.Equal(t, tc.verdict, res.Scenarios[0].Verdict, "%s", res)
			_, ok := copies.Load(2)
			assert.True(t, ok, "the producer's code published the copy itself")
		})
	}
}

// The producer's publish code must publish one message a call.
func TestPublishMisuse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		publish func(context.Context, twicewatermill.Publishing) error
		want    string
	}{
		{"none", func(context.Context, twicewatermill.Publishing) error { return nil }, "published no message; the check follows the message it publishes"},
		{"two", func(_ context.Context, p twicewatermill.Publishing) error {
			return p.Publisher.Publish("orders.placed", message.NewMessage("a", nil), message.NewMessage("b", nil))
		}, `published 2 messages (to ["orders.placed" "orders.placed"]) in one call`},
		{"an error", func(context.Context, twicewatermill.Publishing) error { return errors.New("broker down") }, "the producer's publish code (twicewatermill.Publish) returned: broker down"},
		{"a panic", func(context.Context, twicewatermill.Publishing) error { panic("nil map") }, "returned: panicked: nil map"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := twicewatermill.Job("award-points", nil, nil, handler(false), twicewatermill.Publish(tc.publish))
			res, err := harness.Run(context.Background(), job, config(harness.Config{Faults: []faults.Fault{faults.ProducerRetry()}}))
			if res != nil {
				t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
