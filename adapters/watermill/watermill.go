// Package twicewatermill checks Watermill handlers
// (github.com/ThreeDotsLabs/watermill) with twice, as a Watermill process
// runs them: each delivery is a *message.Message whose UUID is the
// message's (a redelivery carries the same UUID, a producer copy a new
// one), the handler runs through the middleware the user gives, built once
// per worker process, and the messages the handler returns are published
// before the ack, as recorded effects.
//
//	func TestOrderPlaced(t *testing.T) {
//		harness.Check(t, twicewatermill.Job("order-placed", []byte(`{"order_id":9812}`), nil,
//			func(d *harness.Delivery) message.HandlerFunc {
//				return orders.Handler{DB: d.DB}.Handle
//			},
//			twicewatermill.Middleware(func() message.HandlerMiddleware {
//				return (&middleware.Deduplicator{}).Middleware
//			})),
//			harness.Config{Setup: []harness.Setup{harness.SQL(orders.Schema)}})
//	}
//
// What each fault means for Watermill:
//
//   - crash-before-ack, crash-mid-job, ambiguous-commit, redrive: the
//     process dies (or its handler fails and the message is left unacked);
//     the broker redelivers the same message, same UUID, to a process
//     started afresh: its middleware's memory (an in-memory Deduplicator's
//     keys) is gone.
//   - lost-ack: the handler succeeded and the ack was lost; the broker
//     redelivers to the same live process (its memory kept) and to another.
//   - a handler error (a failed effect call, a lost commit reply): the
//     subscriber nacks and resends the message to the same process, as
//     Watermill's subscribers do, up to Redeliveries times within the
//     delivery; only then does the delivery fail. So an in-memory
//     Deduplicator that remembered the message on the failed try skips
//     the retry, and the work it should have done is missing.
//   - producer-retry: the producer publishes the payload again, under a
//     new UUID.
//
// Messages the handler returns are published, before the ack, as effects
// of kind EffectKind: payload, metadata and topic are compared, the UUID
// (random in Watermill) is only printed. A publish whose call fails nacks
// the message, as the router does.
//
// The broker is modelled as a table, twice_watermill_messages, that the
// harness reads and writes on its own connection and leaves out of the
// comparison: a message once acked is not handed out again. With the SQL
// option the broker is watermill-sql itself, run for real: see SQL. Either
// way the job carries the broker's tables: the harness makes them before
// the config's own setup, in harness.Check, harness.Run and
// harness.Explore alike.
//
// Not modelled: message.HandlerNameFromCtx and the router's other context
// values (only message.Router can set their keys), router plugins and
// decorators, and broker resend delays (resends are immediate).
package twicewatermill

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
)

// EffectKind is the effect kind of a message the handler publishes, for
// harness.Config.EffectPolicies and IgnoreEffectFields ("message.metadata").
const EffectKind = "message"

// DefaultRedeliveries is how many times, by default, the subscriber
// resends a nacked message to the same process within one delivery.
const DefaultRedeliveries = 3

// Option changes how a Watermill handler is checked.
type Option func(*options)

type options struct {
	middleware   []func() message.HandlerMiddleware
	redeliveries int
	publishTopic string
	sql          *sqlTopic
}

// Middleware is the handler's middleware, outermost first, as
// Router.AddMiddleware and Handler.AddMiddleware take it. Each function is
// called once per worker process, so state a middleware keeps in memory
// (middleware.Deduplicator's map) lives as long as that process: it
// survives a lost ack and is lost in a crash.
func Middleware(newMiddleware ...func() message.HandlerMiddleware) Option {
	return func(o *options) { o.middleware = append(o.middleware, newMiddleware...) }
}

// Redeliveries is how many times the subscriber resends a nacked message
// to the same process before the delivery fails; 0 for none.
func Redeliveries(n int) Option {
	return func(o *options) { o.redeliveries = n }
}

// PublishTopic is the topic the handler's messages are published to,
// compared with them; "" by default.
func PublishTopic(topic string) Option {
	return func(o *options) { o.publishTopic = topic }
}

// Job is a Watermill handler for harness.Check, harness.Explore and the
// runner: payload and metadata make the message the producer publishes,
// and newHandler builds the handler for each delivery from the
// delivery's connections (d.DB, d.DSN) and clock (d.Now). The handler
// runs behind the middleware given with Middleware, built per worker.
func Job(name string, payload message.Payload, metadata message.Metadata, newHandler func(d *harness.Delivery) message.HandlerFunc, opts ...Option) harness.Job {
	o := options{redeliveries: DefaultRedeliveries}
	for _, opt := range opts {
		opt(&o)
	}
	var q queue.Queue = &broker{name: name}
	if o.sql != nil {
		q = &sqlQueue{name: name, t: *o.sql, payload: payload, metadata: metadata}
	}
	return harness.Job{
		Name:  name,
		Queue: q,
		NewWorker: func() harness.Handler {
			w := &worker{name: name, payload: payload, metadata: metadata, newHandler: newHandler, opts: o}
			// The router wraps a handler in its middleware once, when it
			// starts; so does the worker, around whichever delivery's
			// handler the message carries. A Deduplicator with no
			// Repository makes its map in that call: one per process.
			w.chain = deliveryHandler
			for i := len(o.middleware) - 1; i >= 0; i-- {
				w.chain = o.middleware[i]()(w.chain)
			}
			return w.deliver
		},
	}
}

// worker is one process: the handler's middleware, built once.
type worker struct {
	name       string
	payload    message.Payload
	metadata   message.Metadata
	newHandler func(*harness.Delivery) message.HandlerFunc
	opts       options
	chain      message.HandlerFunc
}

// handlerKey is the context key of the delivery's own handler.
type handlerKey struct{}

// deliveryHandler runs the handler of the delivery msg belongs to.
func deliveryHandler(msg *message.Message) ([]*message.Message, error) {
	h, _ := msg.Context().Value(handlerKey{}).(message.HandlerFunc)
	if h == nil {
		return nil, errors.New("twicewatermill: a middleware handed the handler a message whose context is not the delivery's; derive a new context from msg.Context()")
	}
	return h(msg)
}

// MessageUUID is the UUID of the message the producer published for the
// job jobID of the check name: the same for every redelivery of the job,
// another for a producer copy, and the same in every run, so a handler
// that stores it compares with the clean run.
func MessageUUID(name, jobID string) string {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte("twice-watermill:"+name+"/"+jobID)).String()
}

// deliver is one delivery to this process: the message goes through the
// middleware and the handler, and is resent after a nack, as the
// subscriber does, until it is acked or Redeliveries runs out.
func (w *worker) deliver(ctx context.Context, d *harness.Delivery) error {
	h := w.newHandler(d)
	if h == nil {
		return fmt.Errorf("twicewatermill: job %q, message of job %s (attempt %d): newHandler returned a nil handler", w.name, d.JobID, d.Attempt)
	}
	ctx = context.WithValue(ctx, handlerKey{}, h)
	if w.opts.sql != nil {
		return w.deliverSQL(ctx, d, w.chain)
	}
	var err error
	for try := 0; try <= w.opts.redeliveries; try++ {
		msg := message.NewMessage(MessageUUID(w.name, d.JobID), append(message.Payload(nil), w.payload...))
		msg.Metadata = maps.Clone(w.metadata)
		if msg.Metadata == nil {
			msg.Metadata = message.Metadata{}
		}
		msg.SetContext(ctx)
		var panicked bool
		err, panicked = w.handle(ctx, d, w.chain, msg, try)
		if err == nil || panicked || ctx.Err() != nil {
			break
		}
	}
	return err
}

// handle runs h on msg and publishes what it returns; an error is a nack.
// A panic is not recovered by Watermill's router (only by
// middleware.Recoverer): it ends the process, so it is not retried here.
func (w *worker) handle(ctx context.Context, d *harness.Delivery, h message.HandlerFunc, msg *message.Message, try int) (err error, panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("twicewatermill: job %q: the handler panicked on message %s of job %s (attempt %d, %s, try %d in this process): %v; Watermill's router does not recover a panic unless middleware.Recoverer is in the chain, so the process would die",
				w.name, msg.UUID, d.JobID, d.Attempt, d.Kind, try+1, p)
			panicked = true
		}
	}()
	produced, err := h(msg)
	if err != nil {
		return err, false
	}
	for _, m := range produced {
		if m == nil {
			return fmt.Errorf("twicewatermill: job %q: the handler returned a nil message", w.name), false
		}
		if err := d.Effect(ctx, EffectKind, m.UUID, published(w.opts.publishTopic, m), func(context.Context) error { return nil }); err != nil {
			return fmt.Errorf("publishing message %s: %w", m.UUID, err), false
		}
	}
	return nil, false
}

// publishedMessage is what a published message is compared by.
type publishedMessage struct {
	Topic    string            `json:"topic,omitempty"`
	Payload  any               `json:"payload"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

func published(topic string, m *message.Message) publishedMessage {
	var payload any = []byte(m.Payload)
	if utf8.Valid(m.Payload) {
		payload = string(m.Payload)
	}
	return publishedMessage{Topic: topic, Payload: payload, Metadata: m.Metadata}
}

func jobNumber(id string) (int64, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("message ID %q is not the broker's: %w", id, err)
	}
	return n, nil
}
