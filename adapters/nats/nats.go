package twicenats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
)

// JetStream's defaults, as nats-server v2.15 applies them to a stream and
// a consumer that leave them zero.
const (
	// DefaultAckWait is the server's AckWait: a message not acked this
	// long after it was delivered is delivered again.
	DefaultAckWait = 30 * time.Second
	// DefaultDuplicates is the stream's duplicate window: a message whose
	// Nats-Msg-Id the stream saw this recently is refused.
	DefaultDuplicates = 2 * time.Minute
)

// hold is the AckWait of the consumer the server actually runs: longer
// than any scenario, so the server's wall-clock timer never fires and the
// adapter releases each redelivery when the harness clock reaches it.
const hold = 24 * time.Hour

// fetchWait bounds how long the adapter waits for a message the server
// must deliver (one published, or released for redelivery); a server that
// does not is an internal error, never a verdict.
const fetchWait = 10 * time.Second

// Spec is the production stream, consumer and message.
type Spec struct {
	// Stream is the stream's configuration as production creates it.
	// Subjects must cover Subject. Its Name is what the handler sees in
	// Metadata().Stream; Duplicates is the dedup window (zero:
	// DefaultDuplicates). The storage is memory whatever it says.
	Stream jetstream.StreamConfig
	// Consumer is the pull consumer's configuration as production creates
	// it: AckWait, BackOff and MaxDeliver are the server's timing, which
	// the adapter runs on the harness clock. AckPolicy must be
	// AckExplicitPolicy (its zero value). DeliverSubject must be empty.
	Consumer jetstream.ConsumerConfig
	// Subject, Data and Header are the message the producer publishes.
	Subject string
	Data    []byte
	Header  nats.Header
	// MsgID is sent as Nats-Msg-Id (jetstream.WithMsgID), so the stream
	// refuses a producer's copy inside its duplicate window. Empty sends
	// none and every copy is a message of its own.
	MsgID string
	// Publish, when set, is the producer's own publish code, run for the
	// original and for each producer copy at the copy's time on the
	// harness clock instead of publishing Data, Header and MsgID (leave
	// them empty): what it builds at publish time (a Nats-Msg-Id from
	// its own data or a fresh one, a stamped payload) is the copy's. It
	// must publish one message to Subject per call; a copy that publishes
	// none was refused by the producer itself. Pass production's function
	// unchanged, wired to p:
	//
	//	Publish: func(ctx context.Context, p twicenats.Publishing) error {
	//		return ledger.Credit(ctx, p.JetStream, p.Now(), 9812)
	//	},
	Publish func(ctx context.Context, p Publishing) error
}

// Job is a JetStream consumer for harness.Check, harness.Run,
// harness.Explore and the runner: spec is the stream, consumer and message,
// and newHandler builds the production jetstream.MessageHandler (what
// Consume calls, or a pull loop's body for one message) for each delivery
// from its connections (d.DB, d.DSN) and clock (d.Now), as the consumer's
// process would at start-up.
func Job(name string, spec Spec, newHandler func(d *harness.Delivery) jetstream.MessageHandler) harness.Job {
	q := &natsQueue{name: name, spec: spec, timing: timingOf(spec)}
	return harness.Job{
		Name:    name,
		Queue:   q,
		Handler: func(ctx context.Context, d *harness.Delivery) error { return q.work(ctx, d, newHandler) },
	}
}

// timing is the consumer's and stream's timing as the server normalises
// it (a test holds it equal to what the server answers).
type timing struct {
	ackWait    time.Duration
	backOff    []time.Duration
	maxDeliver int
	duplicates time.Duration
}

func timingOf(s Spec) timing {
	t := timing{ackWait: s.Consumer.AckWait, backOff: s.Consumer.BackOff, maxDeliver: s.Consumer.MaxDeliver, duplicates: s.Stream.Duplicates}
	if t.ackWait <= 0 {
		t.ackWait = DefaultAckWait
	}
	if len(t.backOff) > 0 {
		// The server's rule (consumer.go, setConsumerConfigDefaults):
		// BackOff overrides AckWait, whatever AckWait says.
		t.ackWait = t.backOff[0]
	}
	if t.maxDeliver == 0 {
		t.maxDeliver = -1
	}
	if t.duplicates <= 0 {
		t.duplicates = DefaultDuplicates
	}
	return t
}

// redeliverAfter is how long after delivery n (from 1) the server hands an
// unacked message out again: BackOff[n-1] (its last entry from then on),
// else AckWait.
func (t timing) redeliverAfter(n int) time.Duration {
	if l := len(t.backOff); l > 0 {
		return t.backOff[min(max(n-1, 0), l-1)]
	}
	return t.ackWait
}

// natsQueue is JetStream's side of one job, as a queue.Queue. Scenarios
// run in parallel on one queue, each on its own stream, found by the name
// of the scenario's database.
type natsQueue struct {
	name   string
	spec   Spec
	timing timing

	mu        sync.Mutex
	scenarios map[string]*scenario
}

var streams atomic.Int64

// scenario is one scenario's stream and what the adapter knows of its
// messages.
type scenario struct {
	prefix   string // subject prefix of this scenario's stream
	stream   jetstream.Stream
	consumer jetstream.Consumer
	js       jetstream.JetStream

	mu       sync.Mutex
	messages map[uint64]*message // by stream sequence
	pulled   map[uint64]jetstream.Msg
	original time.Time // job 1's enqueue, on the harness clock
}

// message is one stream message's fate on the server.
type message struct {
	last *delivery // the latest delivery, unsettled on the server unless done
	done string    // why the server delivers it no more
	// complete: acked or terminated, not given up after MaxDeliver.
	complete  bool
	releaseAt time.Time // a Nak's redelivery, on the harness clock
	naked     bool
}

func dbKey(op queue.Op) (string, error) {
	if op.Conn == nil {
		return "", errors.New("twicenats: the queue operation carries no connection to the scenario's database")
	}
	return op.Conn.Config().Database, nil
}

func (q *natsQueue) scenarioOf(op queue.Op) (*scenario, error) {
	key, err := dbKey(op)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.scenarios[key]
	if s == nil {
		return nil, fmt.Errorf("twicenats: job %q: no stream for database %s: job 1 was not enqueued first", q.name, key)
	}
	return s, nil
}

// Schema is the zero Schema: JetStream keeps nothing in PostgreSQL.
func (q *natsQueue) Schema() queue.Schema { return queue.Schema{} }

// Rules are the consumer's timing: a message is delivered again AckWait
// (BackOff[0] when BackOff is set, as the server overrides AckWait with
// it) after a delivery that did not ack it; the server never cancels a
// handler, never hands one message to two deliveries before that time,
// and refuses a producer's copy with the same Nats-Msg-Id within the
// stream's duplicate window. The handler answers for its message itself
// (queue.Rules.HandlerSettles): a Fetch made while another delivery's
// handler runs, which may or may not have answered yet, is a race.
func (q *natsQueue) Rules() queue.Rules {
	r := queue.Rules{Redeliver: q.timing.redeliverAfter(1), OneDeliveryAtATime: true, HandlerSettles: true}
	// The producer's own code may send a Nats-Msg-Id.
	if q.spec.MsgID != "" || q.spec.Publish != nil {
		r.Dedup = q.timing.duplicates
	}
	return r
}

func (q *natsQueue) check() error {
	c := q.spec.Consumer
	switch {
	case c.AckPolicy != jetstream.AckExplicitPolicy:
		return fmt.Errorf("twicenats: job %q: Consumer.AckPolicy is %v; the adapter runs explicit acks (AckExplicitPolicy), which the handler sends per message", q.name, c.AckPolicy)
	case q.spec.Subject == "":
		return fmt.Errorf("twicenats: job %q: Spec.Subject is empty; name the subject the producer publishes to", q.name)
	case q.spec.Publish != nil && (q.spec.Data != nil || q.spec.Header != nil || q.spec.MsgID != ""):
		return fmt.Errorf("twicenats: job %q: both Spec's Data, Header or MsgID and Spec.Publish say what is published; leave them empty and let the producer's code build the message", q.name)
	case len(q.spec.Stream.Subjects) == 0:
		return fmt.Errorf("twicenats: job %q: Spec.Stream.Subjects is empty; give the stream's subjects as production creates it", q.name)
	}
	return nil
}

// prefixed puts a scenario's subject prefix before each of subjects.
func prefixed(prefix string, subjects []string) []string {
	if len(subjects) == 0 {
		return nil
	}
	out := make([]string, len(subjects))
	for i, s := range subjects {
		out[i] = prefix + s
	}
	return out
}

// open makes the scenario's stream and consumer afresh, under names of
// its own, so scenarios running side by side never share a message.
func (q *natsQueue) open(ctx context.Context, key string) (*scenario, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	nc, err := connection()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("twicenats: a JetStream context: %w", err)
	}
	n := streams.Add(1)
	prefix := fmt.Sprintf("twice%d.", n)
	sc := q.spec.Stream
	sc.Name = fmt.Sprintf("TWICE_%d", n)
	sc.Subjects = prefixed(prefix, sc.Subjects)
	sc.Storage = jetstream.MemoryStorage
	sc.Duplicates = q.timing.duplicates
	stream, err := js.CreateStream(ctx, sc)
	if err != nil {
		return nil, fmt.Errorf("twicenats: job %q: creating the stream (%s as %s): %w", q.name, q.spec.Stream.Name, sc.Name, err)
	}
	cc := q.spec.Consumer
	cc.AckWait, cc.BackOff = hold, nil // the harness clock runs them
	cc.FilterSubject = ""
	if q.spec.Consumer.FilterSubject != "" {
		cc.FilterSubject = prefix + q.spec.Consumer.FilterSubject
	}
	cc.FilterSubjects = prefixed(prefix, cc.FilterSubjects)
	consumer, err := stream.CreateOrUpdateConsumer(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("twicenats: job %q: creating the consumer: %w", q.name, err)
	}
	s := &scenario{prefix: prefix, stream: stream, consumer: consumer, js: js,
		messages: map[uint64]*message{}, pulled: map[uint64]jetstream.Msg{}}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.scenarios == nil {
		q.scenarios = map[string]*scenario{}
	}
	if old := q.scenarios[key]; old != nil {
		_ = js.DeleteStream(ctx, old.stream.CachedInfo().Config.Name)
	}
	q.scenarios[key] = s
	return s, nil
}

// Enqueue publishes the message with the real JetStream client, with
// Nats-Msg-Id when Spec.MsgID is set: the server's PubAck says whether
// the stream refused a copy as a duplicate. Job 1 starts a fresh stream.
func (q *natsQueue) Enqueue(ctx context.Context, op queue.Op) (queue.Enqueued, error) {
	key, err := dbKey(op)
	if err != nil {
		return queue.Enqueued{}, err
	}
	var s *scenario
	if op.Job == 1 {
		s, err = q.open(ctx, key)
	} else {
		s, err = q.scenarioOf(op)
	}
	if err != nil {
		return queue.Enqueued{}, err
	}
	if q.spec.Publish != nil {
		s.mu.Lock()
		if op.Job == 1 {
			s.original = op.Now
		}
		late := op.Job > 1 && op.Now.Sub(s.original) >= q.timing.duplicates
		s.mu.Unlock()
		return q.publishByCode(ctx, op, s, late)
	}
	msg := &nats.Msg{Subject: s.prefix + q.spec.Subject, Data: q.spec.Data, Header: nats.Header{}}
	for k, v := range q.spec.Header {
		msg.Header[k] = append([]string(nil), v...)
	}
	var opts []jetstream.PublishOpt
	if q.spec.MsgID != "" {
		opts = append(opts, jetstream.WithMsgID(q.spec.MsgID))
	}
	s.mu.Lock()
	if op.Job == 1 {
		s.original = op.Now
	}
	late := q.spec.MsgID != "" && op.Job > 1 && op.Now.Sub(s.original) >= q.timing.duplicates
	s.mu.Unlock()
	ack, err := q.publish(ctx, s, msg, late, opts)
	if err != nil {
		return queue.Enqueued{}, err
	}
	if ack.Duplicate {
		return queue.Enqueued{Duplicate: true, Reason: fmt.Sprintf("the stream's duplicate window (%v) holds Nats-Msg-Id %q (stream sequence %d)", q.timing.duplicates, q.spec.MsgID, ack.Sequence)}, nil
	}
	s.mu.Lock()
	s.messages[ack.Sequence] = &message{}
	s.mu.Unlock()
	return queue.Enqueued{JobID: strconv.FormatUint(ack.Sequence, 10)}, nil
}

// publish publishes msg with the real client. A late copy (past the
// duplicate window on the harness clock) is published once the stream has
// forgotten its ID, as it has by then in production: the server's window
// runs on the wall clock, so it is shortened to its minimum (100ms), the
// copy is published again until the server's own purge has dropped the
// ID, and the window is put back.
func (q *natsQueue) publish(ctx context.Context, s *scenario, msg *nats.Msg, late bool, opts []jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if !late {
		ack, err := s.js.PublishMsg(ctx, msg, opts...)
		if err != nil {
			return nil, fmt.Errorf("publishing to %s: %w", q.spec.Subject, err)
		}
		return ack, nil
	}
	info, err := s.stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the stream: %w", err)
	}
	cfg := info.Config
	shorten := func(window time.Duration) error {
		short := cfg
		short.Duplicates = window
		if _, err := s.js.UpdateStream(ctx, short); err != nil {
			return fmt.Errorf("shortening the stream's duplicate window: %w", err)
		}
		return nil
	}
	if err := shorten(minDuplicates); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(fetchWait)
	for i := 1; ; i++ {
		ack, err := s.js.PublishMsg(ctx, msg, opts...)
		if err != nil {
			return nil, fmt.Errorf("publishing a late copy to %s: %w", q.spec.Subject, err)
		}
		if !ack.Duplicate {
			if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
				return nil, fmt.Errorf("restoring the stream's duplicate window: %w", err)
			}
			return ack, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the stream still refused Nats-Msg-Id %q %v after its duplicate window was shortened to %v", msg.Header.Get(jetstream.MsgIDHeader), fetchWait, minDuplicates)
		}
		if i%4 == 0 {
			// The server restarts its purge timer on an update before
			// it takes the new window, so the purge may have run with
			// the old one and set itself for its end: change the window
			// again to restart it with the short one.
			if err := shorten(minDuplicates + time.Duration(i%8/4)*time.Millisecond); err != nil {
				return nil, err
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(minDuplicates / 4):
		}
	}
}

// minDuplicates is the shortest duplicate window the server accepts.
const minDuplicates = 100 * time.Millisecond

// Fetch hands the message out as the server would at op.Now: a message
// acked or terminated is not delivered again, nor one that reached
// MaxDeliver; an unacked one is delivered again once its AckWait (or
// BackOff entry, or Nak delay) has passed on the harness clock. The
// message itself is pulled from the server with the real consumer (Fetch),
// so its metadata (NumDelivered, sequences) is the server's.
func (q *natsQueue) Fetch(ctx context.Context, op queue.Op) (queue.Fetched, error) {
	s, err := q.scenarioOf(op)
	if err != nil {
		return queue.Fetched{}, err
	}
	seq, err := strconv.ParseUint(op.JobID, 10, 64)
	if err != nil {
		return queue.Fetched{}, fmt.Errorf("job ID %q is not a stream sequence: %w", op.JobID, err)
	}
	s.mu.Lock()
	m := s.messages[seq]
	s.mu.Unlock()
	if m == nil {
		return queue.Fetched{}, fmt.Errorf("stream sequence %d was never published", seq)
	}
	if last := m.last; last != nil && m.done == "" {
		if err := q.takeIn(ctx, s, m, last, op.Now); err != nil {
			return queue.Fetched{}, err
		}
	}
	if m.done != "" {
		return queue.Fetched{Done: m.complete, Reason: m.done}, nil
	}
	if last := m.last; last != nil {
		due := q.dueAt(m, last)
		if op.Now.Before(due) {
			if m.naked {
				// Due again later, as a scheduled job is: the harness
				// moves its clock there.
				why := fmt.Sprintf("stream sequence %d was Nak'd with a delay; the server delivers it again in %v", seq, due.Sub(op.Now))
				return queue.Fetched{Reason: why, DueAt: due}, nil
			}
			// Held by a delivery: not a scheduled job, so no DueAt, or
			// the harness would move its clock to the AckWait and turn a
			// concurrent delivery into a redelivery.
			why := fmt.Sprintf("delivery %d holds stream sequence %d until its AckWait passes at +%v", last.n, seq, due.Sub(last.from))
			return queue.Fetched{Reason: why}, nil
		}
		if q.timing.maxDeliver > 0 && last.n >= q.timing.maxDeliver {
			m.done = fmt.Sprintf("stream sequence %d reached MaxDeliver (%d deliveries): the server delivers it no more", seq, q.timing.maxDeliver)
			return queue.Fetched{Reason: m.done}, nil
		}
		// The server's AckWait timer (or the Nak's delay) on the harness
		// clock: the server redelivers a message Nak'd with no delay at
		// once. It is sent on the reply subject, not through last.msg,
		// so the delivery that may still run can ack it as its own.
		if err := s.js.Conn().Publish(last.msg.Reply(), []byte("-NAK")); err != nil {
			return queue.Fetched{}, fmt.Errorf("releasing stream sequence %d for redelivery: %w", seq, err)
		}
	}
	msg, err := s.pull(ctx, seq)
	if err != nil {
		return queue.Fetched{}, err
	}
	md, err := msg.Metadata()
	if err != nil {
		return queue.Fetched{}, fmt.Errorf("the metadata of stream sequence %d: %w", seq, err)
	}
	want := 1
	if m.last != nil {
		want = m.last.n + 1
	}
	if int(md.NumDelivered) != want {
		return queue.Fetched{}, fmt.Errorf("the server delivered stream sequence %d for the %d. time; the adapter expected the %d. time", seq, md.NumDelivered, want)
	}
	d := &delivery{msg: msg, seq: seq, n: int(md.NumDelivered), from: op.Now, returned: make(chan struct{})}
	s.mu.Lock()
	m.last, m.naked, m.releaseAt = d, false, time.Time{}
	s.mu.Unlock()
	return queue.Fetched{Delivered: true, Attempt: d.n, Job: d}, nil
}

// dueAt is when the server delivers m again after delivery last.
func (q *natsQueue) dueAt(m *message, last *delivery) time.Time {
	if m.naked {
		return m.releaseAt
	}
	from := last.from
	last.mu.Lock()
	if n := len(last.progress); n > 0 {
		from = last.progress[n-1]
	}
	last.mu.Unlock()
	return from.Add(q.timing.redeliverAfter(last.n))
}

// pull takes stream sequence seq from the consumer with the real client.
// A message the server delivers ahead of it (a redelivery goes before new
// messages) is kept for the delivery that asks for it, as a client's
// prefetch holds it.
func (s *scenario) pull(ctx context.Context, seq uint64) (jetstream.Msg, error) {
	for {
		s.mu.Lock()
		if msg, ok := s.pulled[seq]; ok {
			delete(s.pulled, seq)
			s.mu.Unlock()
			return msg, nil
		}
		s.mu.Unlock()
		fctx, cancel := context.WithTimeout(ctx, fetchWait)
		batch, err := s.consumer.Fetch(1, jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			return nil, fmt.Errorf("pulling stream sequence %d: %w", seq, err)
		}
		got, err := s.take(batch)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("pulling stream sequence %d: %w", seq, err)
		}
		if got == 0 {
			return nil, fmt.Errorf("the server delivered nothing within %v where it must deliver stream sequence %d", fetchWait, seq)
		}
	}
}

// take keeps the messages of one pull, by stream sequence, and counts
// them.
func (s *scenario) take(batch jetstream.MessageBatch) (int, error) {
	got := 0
	for msg := range batch.Messages() {
		got++
		md, err := msg.Metadata()
		if err != nil {
			return got, fmt.Errorf("the metadata of a pulled message: %w", err)
		}
		s.mu.Lock()
		s.pulled[md.Sequence.Stream] = msg
		s.mu.Unlock()
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
		return got, err
	}
	return got, nil
}

// work runs one delivery: the production handler with the server's
// message, through a jetstream.Msg whose acks the queue sends.
func (q *natsQueue) work(ctx context.Context, hd *harness.Delivery, newHandler func(*harness.Delivery) jetstream.MessageHandler) error {
	d, ok := hd.Queued.(*delivery)
	if !ok || d == nil {
		return fmt.Errorf("twicenats: job %q, delivery %d of job %s: the delivery carries no JetStream message (%T); run it through twicenats.Job", q.name, hd.Attempt, hd.JobID, hd.Queued)
	}
	defer close(d.returned)
	d.mu.Lock()
	d.ctx = ctx
	d.mu.Unlock()
	// The handler's pool is the delivery's, with a tracer: an answer
	// followed by a statement was on the wire before that statement.
	pcfg, err := pgxpool.ParseConfig(hd.DSN)
	if err != nil {
		return fmt.Errorf("twicenats: job %q: the delivery's DSN: %w", q.name, err)
	}
	counter := &queryCounter{}
	pcfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(context.WithoutCancel(ctx), pcfg)
	if err != nil {
		return fmt.Errorf("twicenats: job %q: a pool on the delivery's DSN: %w", q.name, err)
	}
	defer func() {
		if pool.Stat().AcquiredConns() > 0 {
			// The handler kept a connection (a transaction left open):
			// Close would wait for it; the harness cuts it.
			go pool.Close()
			return
		}
		pool.Close()
	}()
	view := *hd
	view.DB = pool
	h := newHandler(&view)
	if h == nil {
		return fmt.Errorf("twicenats: job %q, stream sequence %d: newHandler returned a nil MessageHandler", q.name, d.seq)
	}
	h(&deliveryMsg{Msg: productionView{Msg: d.msg, spec: q.spec}, d: d, ctx: ctx, now: hd.Now, queries: counter})
	d.mu.Lock()
	defer d.mu.Unlock()
	if a := d.ans; a.alive && a.kind != noAck && !d.sent && counter.n.Load() > a.queries {
		// The handler went on after its answer (and may have died
		// there): the answer reached the server first.
		d.sent = true
		if err := send(context.WithoutCancel(ctx), d, a); err != nil {
			return err
		}
	}
	return nil
}

// takeIn takes in what the server learnt from delivery d before another
// delivery of its message is asked for. An answer the handler gave while
// it still runs (it is held at a later step) went to the server when it
// was given, and is sent now; so did one a worker gave before it died
// later in the handler. An answer the handler gave last, before it
// returned, is the ack the harness sends or withholds (crash-before-ack,
// lost-ack). A dead handler is waited for, so its answer is known.
func (q *natsQueue) takeIn(ctx context.Context, s *scenario, m *message, d *delivery, now time.Time) error {
	d.mu.Lock()
	hctx := d.ctx
	d.mu.Unlock()
	if hctx == nil {
		return nil
	}
	if hctx.Err() != nil {
		select {
		case <-d.returned:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(fetchWait):
			return fmt.Errorf("the dead delivery %d of stream sequence %d did not return within %v", d.n, d.seq, fetchWait)
		}
	}
	returned := false
	select {
	case <-d.returned:
		returned = true
	default:
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.ans
	if !returned && a.kind != noAck && a.alive && !d.sent {
		d.sent = true
		if err := send(ctx, d, a); err != nil {
			return err
		}
	}
	if d.sent && !d.recorded {
		d.recorded = true
		s.mu.Lock()
		q.record(m, d, a, now)
		s.mu.Unlock()
	}
	return nil
}

// send puts a handler's answer on the wire with the real client. An Ack
// goes as DoubleAck, so the server has applied it before the harness's
// next operation (the handler's own Ack would be applied a moment later).
func send(ctx context.Context, d *delivery, a answer) error {
	var err error
	switch a.kind {
	case ackAck, ackDouble:
		actx, cancel := context.WithTimeout(ctx, fetchWait)
		err = d.msg.DoubleAck(actx)
		cancel()
	case ackNak:
		err = d.msg.Nak()
	case ackNakDelay:
		err = d.msg.NakWithDelay(a.delay)
	case ackTerm:
		if a.reason != "" {
			err = d.msg.TermWithReason(a.reason)
		} else {
			err = d.msg.Term()
		}
	}
	if err != nil {
		return fmt.Errorf("twicenats: sending %v for stream sequence %d: %w", a.kind, d.seq, err)
	}
	return nil
}

// record notes what the server does with m after d's answer a, given at
// now on the harness clock (zero: at the delivery's start).
func (q *natsQueue) record(m *message, d *delivery, a answer, now time.Time) {
	if now.IsZero() {
		now = d.from
	}
	switch a.kind {
	case ackAck, ackDouble:
		m.done, m.complete = fmt.Sprintf("stream sequence %d was acked by delivery %d", d.seq, d.n), true
	case ackTerm:
		m.done, m.complete = fmt.Sprintf("stream sequence %d was terminated by delivery %d (Term)", d.seq, d.n), true
	case ackNak:
		m.naked, m.releaseAt = true, now
	case ackNakDelay:
		m.naked, m.releaseAt = true, now.Add(q.nakDelay(d, a.delay))
	}
}

// nakDelay is when the server delivers again after NakWithDelay(delay) of
// delivery d: it dates the message back by AckWait and adds delay, then
// waits for the BackOff entry of the next delivery (consumer.go,
// processNak and checkPending), so with BackOff the delay grows by
// BackOff[n-1] - BackOff[0].
func (q *natsQueue) nakDelay(d *delivery, delay time.Duration) time.Duration {
	return max(delay-q.timing.ackWait+q.timing.redeliverAfter(d.n), 0)
}

// Ack sends the handler's answer (the MessageHandler returns nothing; its
// answer is what it called on the message) and says what the server does
// next.
func (q *natsQueue) Ack(ctx context.Context, op queue.Op) (queue.Settled, error) {
	return q.settle(ctx, op)
}

// Nack is Ack: a MessageHandler has no error to return, and a delivery
// that failed (a panic) is settled by what it sent before.
func (q *natsQueue) Nack(ctx context.Context, op queue.Op, _ error) (queue.Settled, error) {
	return q.settle(ctx, op)
}

func (q *natsQueue) settle(ctx context.Context, op queue.Op) (queue.Settled, error) {
	d, ok := op.Queued.(*delivery)
	if !ok || d == nil {
		return queue.Settled{}, fmt.Errorf("the delivery of job %s carries no JetStream message (%T)", op.JobID, op.Queued)
	}
	s, err := q.scenarioOf(op)
	if err != nil {
		return queue.Settled{}, err
	}
	d.mu.Lock()
	a, sent, recorded := d.ans, d.sent, d.recorded
	d.sent, d.recorded = true, true
	d.mu.Unlock()
	if !sent {
		if err := send(ctx, d, a); err != nil {
			return queue.Settled{}, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.messages[d.seq]
	if !recorded {
		if m.done != "" && m.last != d {
			// Another delivery settled it first; the server ignores this one.
			return queue.Settled{Outcome: queue.Completed, Detail: fmt.Sprintf("%v after %s", a.kind, m.done)}, nil
		}
		q.record(m, d, a, op.Now)
	}
	exhausted := q.timing.maxDeliver > 0 && d.n >= q.timing.maxDeliver
	switch a.kind {
	case ackAck, ackDouble:
		return queue.Settled{Outcome: queue.Completed, Detail: a.kind.String()}, nil
	case ackTerm:
		return queue.Settled{Outcome: queue.Cancelled, Detail: strings.TrimSpace("Term " + a.reason)}, nil
	}
	if exhausted {
		m.done = fmt.Sprintf("MaxDeliver (%d) reached after %v: the server delivers stream sequence %d no more", q.timing.maxDeliver, a.kind, d.seq)
		return queue.Settled{Outcome: queue.Discarded, Detail: m.done}, nil
	}
	after := max(q.dueAt(m, d).Sub(op.Now), 0)
	if a.kind == noAck {
		return queue.Settled{Outcome: queue.Retry, After: after, Detail: fmt.Sprintf("not acked: the server delivers it again after AckWait, in %v (delivery %d)", after, d.n)}, nil
	}
	return queue.Settled{Outcome: queue.Retry, After: after, Detail: fmt.Sprintf("%v: the server delivers it again in %v (delivery %d)", a.kind, after, d.n)}, nil
}

// productionView is the server's message as the handler sees it in
// production: the scenario's subject prefix and stream name are the
// adapter's, so Subject and Metadata().Stream are the production ones.
type productionView struct {
	jetstream.Msg
	spec Spec
}

// Subject is the subject the producer published to.
func (v productionView) Subject() string { return v.spec.Subject }

// Metadata is the server's, with the production stream name.
func (v productionView) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := v.Msg.Metadata()
	if err != nil {
		return nil, err
	}
	out := *md
	out.Stream = v.spec.Stream.Name
	return &out, nil
}
