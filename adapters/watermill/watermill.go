// Package twicewatermill checks Watermill handlers
// (github.com/ThreeDotsLabs/watermill) with twice, as a Watermill process
// runs them: each worker process runs Watermill's own message.Router, with
// the user's middleware added once when it starts and the handler (a
// message.HandlerFunc, or a cqrs.EventHandler or cqrs.CommandHandler
// behind Watermill's own EventProcessor or CommandProcessor); each
// delivery is a *message.Message whose UUID is the message's (a
// redelivery carries the same UUID, a producer copy a new one), and the
// messages the handler returns are published by the router before the
// ack, as recorded effects.
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
// A cqrs handler is checked as production builds it, with no glue:
//
//	harness.Check(t, twicewatermill.EventJob("award-points", orders.OrderPlaced{OrderID: 9812},
//		orders.ProcessorConfig(), func(w *twicewatermill.Worker) cqrs.EventHandler {
//			return orders.NewPointsAwarder(w.DB, courier, true)
//		}), cfg)
//
// What each fault means for Watermill:
//
//   - crash-before-ack, crash-mid-job, ambiguous-commit, redrive: the
//     process dies; the broker redelivers the same message, same UUID, to
//     a process started afresh: its middleware's memory (an in-memory
//     Deduplicator's keys) is gone.
//   - lost-ack: the handler succeeded and the ack was lost; the broker
//     redelivers to the same live process (its memory kept) and to another.
//   - a handler error or panic (a failed effect call, a lost commit
//     reply): the router recovers a panic (message/router.go's
//     handleMessage) and nacks, as it nacks an error, and the subscriber
//     resends the message to the same process, up to Redeliveries times
//     within the delivery; only then does the delivery fail. So an
//     in-memory Deduplicator that remembered the message on the failed
//     try drops the resend, and the work it should have done is missing.
//   - concurrent-delivery: each delivery settles on its own, as a
//     broker's delivery does: a copy that fails is handed out again even
//     though the other was acked.
//   - producer-retry: the producer publishes the payload again, under a
//     new UUID (see Producer for copies built per publish, and
//     BrokerDedup for a broker that drops a message ID it has seen).
//
// Messages the handler returns are published, before the ack, as effects
// of kind EffectKind: payload, metadata and topic are compared, the UUID
// (random in Watermill) is only printed. A publish whose call fails nacks
// the message, as the router does.
//
// What is real and what is modelled: the router, the middleware, the cqrs
// processors and, with the SQL option, watermill-sql's publisher and
// subscriber are Watermill's own code. The broker behind the router is
// modelled (twice_watermill_messages and twice_watermill_deliveries, which
// the harness reads and writes on its own connection and leaves out of
// the comparison), since every real broker Watermill speaks to but
// watermill-sql lives outside PostgreSQL: an at-least-once broker whose
// every delivery settles on its own. The subscriber in front of the
// router is the harness's, so that each delivery is one message; a nacked
// message is resent at once (no resend delay). middleware.Retry takes no
// clock, so Retry runs it with its sleeps shortened and says so.
// Either way the job carries the broker's tables: the harness makes them
// before the config's own setup, in harness.Check, harness.Run and
// harness.Explore alike.
//
// README.md in this directory (github.com/runtwice/twice/adapters/watermill) has
// the versions this adapter is tested on, its example and what each
// fault found there, and how to use it from a clone.
package twicewatermill

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"
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
	middleware   []middlewareEntry
	redeliveries int
	publishTopic string
	sql          *sqlTopic
	producer     func(n int, now time.Time) (*message.Message, error)
	dedup        time.Duration
}

// middlewareEntry is one link of the chain, built once per process.
type middlewareEntry struct {
	plain  func() message.HandlerMiddleware
	worker func(*Worker) message.HandlerMiddleware
	retry  *retryEntry
}

func (m middlewareEntry) build(w *Worker) (message.HandlerMiddleware, error) {
	var mw message.HandlerMiddleware
	switch {
	case m.plain != nil:
		mw = m.plain()
	case m.worker != nil:
		mw = m.worker(w)
	case m.retry != nil:
		return m.retry.middleware(), nil
	}
	if mw == nil {
		return nil, errors.New("a middleware constructor returned a nil message.HandlerMiddleware")
	}
	return mw, nil
}

// Middleware is the handler's middleware, outermost first, as
// Router.AddMiddleware takes it. Each function is called once per worker
// process, when its router starts, so state a middleware keeps in memory
// (middleware.Deduplicator's map) lives as long as that process: it
// survives a lost ack and a handler's error or panic (the router nacks and
// the subscriber resends to the same process), and is lost in a crash.
func Middleware(newMiddleware ...func() message.HandlerMiddleware) Option {
	return func(o *options) {
		for _, m := range newMiddleware {
			o.middleware = append(o.middleware, middlewareEntry{plain: m})
		}
	}
}

// WorkerMiddleware is middleware built from the worker process's
// connections (Worker.DB), once per process, as production builds a
// database-backed middleware (a Deduplicator whose repository is a table)
// at startup. It takes its place in the chain among Middleware's, in the
// order the options are given.
func WorkerMiddleware(newMiddleware ...func(w *Worker) message.HandlerMiddleware) Option {
	return func(o *options) {
		for _, m := range newMiddleware {
			o.middleware = append(o.middleware, middlewareEntry{worker: m})
		}
	}
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

// jobSpec is what every worker of a job shares.
type jobSpec struct {
	name string
	opts options
	// newHandler builds Job's handler per delivery; nil for EventJob and
	// CommandJob, whose handlers register themselves with the router.
	newHandler func(*harness.Delivery) message.HandlerFunc
	// register adds the job's handler to a process's router.
	register func(p *process, r *message.Router) error
	// perProcess says the job's handlers are built per process, from
	// the worker's connections.
	perProcess bool
}

func (j *jobSpec) needsPool() bool {
	if j.perProcess {
		return true
	}
	for _, m := range j.opts.middleware {
		if m.worker != nil {
			return true
		}
	}
	return false
}

// message builds the message the producer publishes as copy n.
func (j *jobSpec) message(n int, now time.Time) (*message.Message, error) {
	msg, err := j.opts.producer(n, now)
	if err != nil {
		return nil, fmt.Errorf("building message %d: %w", n, err)
	}
	if msg == nil {
		return nil, fmt.Errorf("building message %d: the producer returned a nil message", n)
	}
	if msg.Metadata == nil {
		msg.Metadata = message.Metadata{}
	}
	return msg, nil
}

// Job is a Watermill handler for harness.Check, harness.Explore and the
// runner: payload and metadata make the message the producer publishes,
// and newHandler builds the handler for each delivery from the
// delivery's connections (d.DB, d.DSN) and clock (d.Now). Each worker
// process runs Watermill's own message.Router, with the handler behind
// the middleware given with Middleware, built once per process.
func Job(name string, payload message.Payload, metadata message.Metadata, newHandler func(d *harness.Delivery) message.HandlerFunc, opts ...Option) harness.Job {
	j := &jobSpec{name: name, newHandler: newHandler}
	j.register = func(p *process, r *message.Router) error {
		r.AddHandler(name, name, p.in, j.opts.publishTopic, publisher{p: p}, messageHandler)
		return nil
	}
	return j.harnessJob(func(n int, _ time.Time) (*message.Message, error) {
		msg := message.NewMessage(MessageUUID(name, strconv.Itoa(n)), append(message.Payload(nil), payload...))
		msg.Metadata = maps.Clone(metadata)
		if msg.Metadata == nil {
			msg.Metadata = message.Metadata{}
		}
		return msg, nil
	}, opts)
}

// harnessJob applies opts and makes the harness's job; producer builds
// the message unless the Producer option replaces it.
func (j *jobSpec) harnessJob(producer func(n int, now time.Time) (*message.Message, error), opts []Option) harness.Job {
	j.opts = options{redeliveries: DefaultRedeliveries, producer: producer}
	for _, opt := range opts {
		opt(&j.opts)
	}
	var q queue.Queue = &broker{job: j}
	if j.opts.sql != nil {
		q = &sqlQueue{job: j, t: *j.opts.sql}
	}
	return harness.Job{
		Name:      j.name,
		Queue:     q,
		NewWorker: func() harness.Handler { return newWorker(j).deliver },
	}
}

// MessageUUID is the UUID of the message the producer published for the
// job jobID of the check name: the same for every redelivery of the job,
// another for a producer copy, and the same in every run, so a handler
// that stores it compares with the clean run.
func MessageUUID(name, jobID string) string {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte("twice-watermill:"+name+"/"+jobID)).String()
}

// deliver is one delivery to this process: the message goes through the
// process's router (its middleware and the handler) and is resent after a
// nack, as the subscriber does, until it is acked or Redeliveries runs
// out.
func (w *worker) deliver(ctx context.Context, d *harness.Delivery) error {
	p, err := w.started(d)
	if err != nil {
		return err
	}
	if err := p.setDelivery(d); err != nil {
		return err
	}
	defer func() { _ = p.setDelivery(nil) }()
	var h message.HandlerFunc
	if w.job.newHandler != nil {
		if h = w.job.newHandler(d); h == nil {
			return fmt.Errorf("twicewatermill: job %q, message of job %s (attempt %d): newHandler returned a nil handler", w.job.name, d.JobID, d.Attempt)
		}
	}
	if w.job.opts.sql != nil {
		return w.deliverSQL(ctx, d, p, h)
	}
	qm, ok := d.Queued.(*queuedMessage)
	if !ok {
		return fmt.Errorf("twicewatermill: job %q: internal: delivery of job %s carries %T, not the broker's message", w.job.name, d.JobID, d.Queued)
	}
	for n := 0; ; n++ {
		msg := qm.message()
		t := &try{d: d, ctx: ctx, handler: h, n: n}
		msg.SetContext(context.WithValue(ctx, tryKey{}, t))
		err := w.hand(ctx, p, msg, t, nil)
		if err == nil || ctx.Err() != nil || n >= w.job.opts.redeliveries {
			return err
		}
	}
}

// hand gives msg to the process's router and waits for its ack or nack;
// a nack returns what the handler did wrong. When the delivery's context
// ends first (its process died), dying runs and hand still waits for the
// router to settle msg, so that the handler has returned, as a handler
// called in line would have, before the delivery ends and its
// connections close.
func (w *worker) hand(ctx context.Context, p *process, msg *message.Message, t *try, dying func()) error {
	if err := p.in.send(ctx, msg); err != nil {
		return err
	}
	select {
	case <-msg.Acked():
		return nil
	case <-msg.Nacked():
		return w.nackError(msg, t, p.takeLogged(msg.UUID))
	case <-ctx.Done():
	}
	if dying != nil {
		dying()
	}
	select {
	case <-msg.Acked():
	case <-msg.Nacked():
	}
	return ctx.Err()
}

// nackError says why the router nacked msg.
func (w *worker) nackError(msg *message.Message, t *try, logged error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.d
	var pe panicError
	switch {
	case t.panicked && errors.As(t.failure, &pe):
		return fmt.Errorf("twicewatermill: job %q: the handler panicked on message %s of job %s (attempt %d, %s, try %d in this process): %v; Watermill's router recovered the panic and nacked the message, so the subscriber resends it to this same process",
			w.job.name, msg.UUID, d.JobID, d.Attempt, d.Kind, t.n+1, pe.value)
	case t.failure != nil:
		return t.failure
	}
	when := "before the handler ran"
	if t.ran {
		when = "after the handler returned nil"
	}
	if logged == nil {
		return fmt.Errorf("twicewatermill: job %q: message %s of job %s (attempt %d, %s, try %d in this process) was nacked %s: a middleware nacked it", w.job.name, msg.UUID, d.JobID, d.Attempt, d.Kind, t.n+1, when)
	}
	return fmt.Errorf("twicewatermill: job %q: message %s of job %s (attempt %d, %s, try %d in this process) was nacked %s: %w", w.job.name, msg.UUID, d.JobID, d.Attempt, d.Kind, t.n+1, when, logged)
}

// queuedMessage is a message as the broker holds it.
type queuedMessage struct {
	UUID     string
	Payload  message.Payload
	Metadata message.Metadata
	// delivery numbers the broker's hand-out, from 1.
	delivery int
}

// message is a fresh copy of m, as each resend carries one.
func (m *queuedMessage) message() *message.Message {
	msg := message.NewMessage(m.UUID, append(message.Payload(nil), m.Payload...))
	msg.Metadata = maps.Clone(m.Metadata)
	if msg.Metadata == nil {
		msg.Metadata = message.Metadata{}
	}
	return msg
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

// Producer builds the message the producer publishes as copy n (1 is the
// original, 2 and up its producer retries) at now, the harness clock's
// time of that publish: a producer that stamps its payload per call
// ("requested_at") or derives the UUID from its own data (so a broker's
// message-ID dedup can catch its retry) is checked as it publishes. By
// default every copy carries the Job's payload and metadata (EventJob's
// and CommandJob's marshaled value) under MessageUUID(name, n).
//
// With SQL, the message must carry MessageUUID(name, n).
func Producer(build func(n int, now time.Time) (*message.Message, error)) Option {
	return func(o *options) { o.producer = build }
}

// BrokerDedup says the broker drops a message whose UUID it has already
// taken within window on the harness clock, as NATS JetStream drops a
// repeated Nats-Msg-Id within its duplicate window (2 minutes by default)
// and as Watermill's NATS and Kafka publishers can be set to send the
// message UUID for it; a negative window drops it for ever. The queue's
// Rules.Dedup is window, so the harness's late producer copies (after the
// original completed, after the window) are in the check's matrix. A
// producer copy under a new UUID is never dropped: give the producer's
// own UUIDs with Producer.
func BrokerDedup(window time.Duration) Option {
	return func(o *options) { o.dedup = window }
}
