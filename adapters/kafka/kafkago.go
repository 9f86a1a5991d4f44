package twicekafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/internal/goid"
)

// ReaderLoop is a segmentio/kafka-go consumer's loop as production writes
// it: it reads r (FetchMessage, or ReadMessage), handles each message and
// commits as it commits in production (CommitMessages after its writes,
// or ReadMessage's commit before them), until ctx is done or r is closed
// (FetchMessage returns io.EOF), and then returns.
type ReaderLoop func(ctx context.Context, r *kafka.Reader) error

// ReaderJob is a segmentio/kafka-go consumer checked as production writes
// it: its own loop, run unchanged on a *kafka.Reader the harness builds
// with kafka.NewReader from the consumer's own cfg (its GroupID, Topic or
// GroupTopics, CommitInterval, StartOffset, balancers and loggers), with
// Brokers and Dialer pointed at the scenario's in-process kfake cluster.
// newLoop builds the loop for each delivery from the delivery's
// connections and clock, as the consumer's process builds it at start-up.
// cfg must name a GroupID and consume rec.Topic; BrokersEnv is refused.
//
// The harness also sets, for the wall clock only: SessionTimeout and
// RebalanceTimeout to 1s and HeartbeatInterval to 100ms (a killed
// worker's member leaves the group in a second, which the harness clock
// counts as SessionTimeout), and MaxWait to at most 100ms (a fetch's wait
// on the broker for data that is not there).
//
// A delivery starts the loop on a new Reader in the group. kafka-go's
// Reader has no hooks, so the delivery's end is read from the Reader and
// the loop's goroutine: the record was handed to the loop once the
// Reader's fetcher has queued past it and its queue no longer holds it
// (Stats: Offset - QueueLength, the messages FetchMessage returned); the
// loop is done with it when, after that, the goroutine that runs the loop
// (or one it started) is parked in Reader.FetchMessage (ReadMessage calls
// it) with every record of the partition handed out: it asks for the next
// message. A loop that returns ends the delivery too. The Reader's Stats
// counters are read (and so reset) by the harness.
//
// Its ack is what production commits then:
//
//   - CommitInterval 0 (kafka-go's synchronous commits): the loop's own
//     CommitMessages (or ReadMessage's, made before the loop handled the
//     message), read back from the group's committed offset.
//   - CommitInterval > 0: kafka-go's background committer, flushed as its
//     tick would be by closing the Reader (Close commits the offsets the
//     loop passed to CommitMessages, then leaves the group).
//
// Past the record, the job is completed; otherwise the consumer restarts
// after RestartDelay and the record comes back from the committed offset.
//
// A worker that dies is a Reader whose connections are cut and whose
// dials are refused before it is closed: it sends nothing more, no commit
// and no LeaveGroup, as a killed process. A live worker that loses the
// partition after its loop was done with the record (a lost ack's
// redelivery) closes its Reader as kafka-go's Close does: it commits what
// the loop had passed to CommitMessages and leaves the group. One still
// handling its message when the partition moves (visibility-timeout) is
// evicted: its connections are cut, so its CommitMessages commits
// nothing, and kafka-go may hold the loop there until its context ends
// (Config.DeliveryTimeout). A fetch reads the group's committed offset
// once the new Reader has joined the group, so a commit the evicted
// worker had in flight is either in it or refused. A loop that returns an
// error is a process that exits on it with a deferred Close.
//
// Modelled: the loop reads the Reader from one goroutine at a time (a
// second goroutine parked in FetchMessage would end the delivery while the
// first still handles its message). A Reader fetches every record of the
// partition from the committed offset, so a producer's copy already in
// the partition is handed to the loop in the same delivery, and the
// copy's own delivery finds it committed. Messages the loop writes are not
// effects yet: a kafka.Writer of its own knows no address of the
// scenario's cluster, which is on an in-memory network.
func ReaderJob(name string, rec Record, cfg kafka.ReaderConfig, newLoop func(d *harness.Delivery) ReaderLoop, opts ...Option) harness.Job {
	q := newQueue(name, rec, opts)
	q.opts.group = cfg.GroupID // the Reader's own group, not Group's
	q.reader = &readerSpec{cfg: cfg, newLoop: newLoop}
	return q.job(q.runReader)
}

// readerSpec is ReaderJob's: the consumer's config and loop.
type readerSpec struct {
	cfg     kafka.ReaderConfig
	newLoop func(*harness.Delivery) ReaderLoop
}

// readerMaxWait caps how long a Reader's fetch waits on the broker for
// new data: a Reader's Close waits for its fetch to come back.
const readerMaxWait = 100 * time.Millisecond

// check refuses a config ReaderJob cannot run, saying what to change.
func (r *readerSpec) check(name, topic string) error {
	switch {
	case r.newLoop == nil:
		return fmt.Errorf("twicekafka: job %q: ReaderJob's newLoop is nil; pass a func that builds the consumer's loop for a delivery", name)
	case r.cfg.GroupID == "":
		return fmt.Errorf("twicekafka: job %q: the kafka.ReaderConfig has no GroupID; ReaderJob checks a consumer-group Reader (set GroupID as production does)", name)
	case r.cfg.Topic != topic && !slices.Contains(r.cfg.GroupTopics, topic):
		return fmt.Errorf("twicekafka: job %q: the kafka.ReaderConfig reads Topic %q (GroupTopics %q), not the record's topic %q; point the Record or the config at the same topic", name, r.cfg.Topic, r.cfg.GroupTopics, topic)
	}
	return nil
}

// readerConsumer is one delivery's Reader in ReaderJob: the loop runs on
// it. It is what Fetch hands out (Delivery.Queued).
type readerConsumer struct {
	process
	r     *kafka.Reader
	conns *connSet
	adm   *kadm.Client // on the scenario's producer
	sync  bool         // CommitInterval 0: each CommitMessages commits

	root      atomic.Uint64 // the id of the goroutine that runs the loop (serve)
	gone      chan struct{} // closed once the Reader is closed
	closeOnce sync.Once
}

// serve is the process's serve, on the goroutine whose id root is.
func (c *readerConsumer) serve() {
	c.root.Store(goid.ID())
	c.process.serve()
}

// kill is the worker's death: its connections are cut before its Reader
// is closed, so nothing more reaches the cluster.
func (c *readerConsumer) kill() {
	if c.killed.Swap(true) {
		return
	}
	c.conns.cut()
	c.end()
}

// leave is a live worker losing the partition. One done with its record
// (a lost ack's) closes its Reader as kafka-go's Close does: it commits
// what the loop passed to CommitMessages and leaves the group. One still
// handling its record is evicted, as the coordinator evicts a member
// whose session ran out: its connections are cut, so its CommitMessages
// fails and commits nothing, and the loop goes on until it returns.
func (c *readerConsumer) leave() {
	if c.killed.Load() {
		return
	}
	if c.returned.Load() {
		c.end()
		return
	}
	c.conns.cut()
}

// end stops the loop and closes the Reader, once; gone is closed when the
// Reader is.
func (c *readerConsumer) end() {
	if c.shut() {
		c.closeReader()
	}
}

// closeReader closes the Reader once, in the background; gone is closed
// when Close returned.
func (c *readerConsumer) closeReader() {
	c.closeOnce.Do(func() {
		go func() {
			defer close(c.gone)
			_ = c.r.Close()
		}()
	})
}

// wait waits for the Reader's Close, bounded.
func (c *readerConsumer) wait() error {
	select {
	case <-c.gone:
		return nil
	case <-time.After(pollTimeout):
		return fmt.Errorf("twicekafka: the kafka-go Reader of group %q did not close within %v", c.r.Config().GroupID, pollTimeout)
	}
}

// fetchReader is Fetch for ReaderJob: every Reader in the group loses it
// (a dead worker's is killed, a live one's closes), a redrive resets the
// group's offset, and a new Reader in the group gets the record unless
// the group's committed offset is past it.
func (q *kafkaQueue) fetchReader(ctx context.Context, op queue.Op, s *scenario, partition int32, offset int64) (queue.Fetched, error) {
	if err := q.reader.check(q.name, q.rec.Topic); err != nil {
		return queue.Fetched{}, err
	}
	open, ok := takeOver(s, &s.readers, op.Now, q.opts.session)
	if !ok {
		return q.stillHeld(s, partition, "a Reader", "its loop has not asked for the next message since its record"), nil
	}
	for _, c := range open {
		if c.diedBeforeCommit(op) {
			c.kill()
		} else {
			c.leave()
		}
		if !c.closed.Load() {
			continue // evicted: it ends with its loop
		}
		if err := c.wait(); err != nil {
			return queue.Fetched{}, err
		}
	}
	adm := kadm.NewClient(s.producer)
	if err := redrive(ctx, adm, op, s, partition, offset); err != nil {
		return queue.Fetched{}, err
	}
	c, err := q.newReaderConsumer(s, partition, offset)
	if err != nil {
		return queue.Fetched{}, err
	}
	// The committed offset is read once the new Reader is in the group: a
	// commit an evicted worker had in flight is then either in it or
	// refused by the coordinator, as the group moved on without it.
	if err := c.joined(); err != nil {
		c.kill()
		_ = c.wait()
		return queue.Fetched{}, fmt.Errorf("twicekafka: job %q: %w", q.name, err)
	}
	at, err := committedOffset(ctx, adm, s.group, s.topic, partition)
	if err == nil && at > offset {
		c.end() // it was never handed to a loop: it leaves the group
		err = c.wait()
		if err == nil {
			return passed(s, at, partition, offset), nil
		}
	}
	if err != nil {
		c.kill()
		_ = c.wait()
		return queue.Fetched{}, err
	}
	c.started = op.Now
	joined(s, &s.readers, &s.allReaders, c)
	return queue.Fetched{Delivered: true, Job: c}, nil
}

// resetOffset commits the record's offset for the group, as a person
// resetting an empty group's offset; a killed worker's member leaves the
// group when its session ends, so the coordinator may refuse at first.
func resetOffset(ctx context.Context, adm *kadm.Client, s *scenario, partition int32, offset int64) error {
	var reset kadm.Offsets
	reset.AddOffset(s.topic, partition, offset, -1)
	for deadline := time.Now().Add(pollTimeout); ; {
		resp, err := adm.CommitOffsets(ctx, s.group, reset)
		if err == nil {
			err = resp.Error()
		}
		if !errors.Is(err, kerr.UnknownMemberID) && !errors.Is(err, kerr.RebalanceInProgress) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(deadSession / 10)
	}
}

// newReaderConsumer builds a delivery's Reader from the consumer's config
// and the scenario's cluster.
func (q *kafkaQueue) newReaderConsumer(s *scenario, partition int32, offset int64) (*readerConsumer, error) {
	if s.dial == nil {
		return nil, fmt.Errorf("twicekafka: job %q: ReaderJob runs on an in-process kfake cluster only", q.name)
	}
	conns := &connSet{dial: s.dial, refusal: errors.New("twicekafka: the worker is dead")}
	cfg := q.reader.cfg
	cfg.Brokers = s.cluster.ListenAddrs()
	dialer := kafka.Dialer{Timeout: 10 * time.Second, DialFunc: conns.dialContext}
	if cfg.Dialer != nil {
		dialer.ClientID = cfg.Dialer.ClientID
	}
	cfg.Dialer = &dialer
	cfg.SessionTimeout, cfg.RebalanceTimeout, cfg.HeartbeatInterval = deadSession, deadSession, deadSession/10
	if cfg.MaxWait == 0 || cfg.MaxWait > readerMaxWait {
		cfg.MaxWait = readerMaxWait
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("twicekafka: job %q: the kafka.ReaderConfig is invalid: %w; kafka.NewReader would panic on it", q.name, err)
	}
	s.group = cfg.GroupID
	c := &readerConsumer{process: newProcess(s.topic, partition, offset), r: kafka.NewReader(cfg), conns: conns,
		adm: kadm.NewClient(s.producer), sync: cfg.CommitInterval == 0, gone: make(chan struct{})}
	go c.serve()
	return c, nil
}

// runReader is a ReaderJob delivery: the loop runs on the delivery's
// Reader until it is done with the record, returns, or the delivery dies.
func (q *kafkaQueue) runReader(ctx context.Context, d *harness.Delivery) error {
	c, ok := d.Queued.(*readerConsumer)
	if !ok || c == nil {
		return fmt.Errorf("twicekafka: job %q, delivery %d of %s: the delivery carries no kafka-go Reader (%T); run it through twicekafka.ReaderJob", q.name, d.Attempt, d.JobID, d.Queued)
	}
	loop := q.reader.newLoop(d)
	if loop == nil {
		return fmt.Errorf("twicekafka: job %q, delivery %d of %s: newLoop returned a nil ReaderLoop", q.name, d.Attempt, d.JobID)
	}
	if !c.run(ctx, d, func(ctx context.Context) error { return loop(ctx, c.r) }) {
		return fmt.Errorf("twicekafka: job %q, delivery %d: its Reader was closed before the loop ran", q.name, d.Attempt)
	}

	deadline := time.Now().Add(pollTimeout)
	for poll, handed := time.Millisecond, false; ; poll = min(2*poll, 20*time.Millisecond) {
		select {
		case <-c.done:
			c.returned.Store(true)
			if !handed && !c.handed() {
				c.end()
				return fmt.Errorf("twicekafka: job %q, delivery %d: the consumer's loop returned before FetchMessage handed it record %s: %w", q.name, d.Attempt, d.JobID, c.err)
			}
			return c.err
		case <-ctx.Done():
			c.kill()
			return ctx.Err()
		case <-time.After(poll):
		}
		if !handed {
			if handed = c.handed(); !handed {
				if time.Now().After(deadline) {
					c.kill()
					return fmt.Errorf("twicekafka: job %q, delivery %d: no FetchMessage of the consumer's loop was handed record %s within %v: does it read the Reader it is given, and does the config's StartOffset reach the record (kafka.FirstOffset for a new group)?", q.name, d.Attempt, d.JobID, pollTimeout)
				}
				continue
			}
		}
		if !c.asking() {
			continue
		}
		end, err := endOffset(ctx, c.adm, c.topic, c.partition)
		if err != nil {
			c.kill()
			return err
		}
		if st := c.r.Stats(); st.QueueLength == 0 && st.Offset >= end && c.asking() {
			c.returned.Store(true)
			return nil
		}
	}
}

// joined waits, bounded, until the Reader's consumer group has given it
// a generation (its join and sync are done: Stats.Rebalances).
func (c *readerConsumer) joined() error {
	deadline := time.Now().Add(pollTimeout)
	for poll := time.Millisecond; c.r.Stats().Rebalances == 0; poll = min(2*poll, 20*time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the kafka-go Reader did not join group %q within %v", c.r.Config().GroupID, pollTimeout)
		}
		time.Sleep(poll)
	}
	return nil
}

// handed reports whether FetchMessage has returned the delivery's record:
// the Reader's fetcher queued every message before Stats.Offset, and
// those still in its queue were not returned. Offset is read before
// QueueLength, so a message queued in between makes it say no, not yes.
func (c *readerConsumer) handed() bool {
	st := c.r.Stats()
	return st.Offset-st.QueueLength > c.offset
}

// fetchFrame is how a goroutine dump names the frame of a goroutine in
// Reader.FetchMessage (ReadMessage calls it).
var fetchFrame = []byte("github.com/segmentio/kafka-go.(*Reader).FetchMessage(")

// asking reports whether the goroutine that runs the loop, or one it
// started, is parked in Reader.FetchMessage: it asks for the next
// message.
func (c *readerConsumer) asking() bool {
	root := c.root.Load()
	if root == 0 {
		return false
	}
	dump := goid.Dump()
	creators := goid.Creators(dump)
	inFamily := func(id uint64) bool {
		for n := 0; id != 0 && n < 1000; n++ {
			if id == root {
				return true
			}
			id = creators[id]
		}
		return false
	}
	for _, block := range bytes.Split(dump, []byte("\n\n")) {
		id, ok := goid.Header(block)
		if !ok || !inFamily(id) {
			continue
		}
		header, _, _ := bytes.Cut(block, []byte("\n"))
		if bytes.Contains(header, []byte("[select")) && bytes.Contains(block, fetchFrame) {
			return true
		}
	}
	return false
}

// endOffset is the partition's end offset: the offset the next record
// produced will have.
func endOffset(ctx context.Context, adm *kadm.Client, topic string, partition int32) (int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("twicekafka: listing %s[%d]'s end offset: %w", topic, partition, err)
	}
	o, ok := ends.Lookup(topic, partition)
	if !ok {
		return 0, fmt.Errorf("twicekafka: listing %s[%d]'s end offset: the cluster has no such partition", topic, partition)
	}
	return o.Offset, nil
}

// ackReader is the commit production makes once the loop is done with
// the record: the loop's own synchronous commits, or kafka-go's
// background committer flushed by closing the Reader; then the group's
// committed offset decides.
func (q *kafkaQueue) ackReader(ctx context.Context, op queue.Op, c *readerConsumer) (queue.Settled, error) {
	c.acked.Store(true)
	defer c.end()
	how := "the loop committed"
	if !c.sync {
		how = "kafka-go's committer (CommitInterval " + c.r.Config().CommitInterval.String() + ") committed"
		c.end()
		if err := c.wait(); err != nil {
			return queue.Settled{}, err
		}
	}
	return q.readBack(ctx, op, &c.process, how, " (the loop passed nothing past it to CommitMessages)")
}

// nackReader is a loop that returned an error: the process exits,
// closing its Reader (a deferred Close), and restarts.
func (q *kafkaQueue) nackReader(c *readerConsumer) (queue.Settled, error) {
	c.end()
	if err := c.wait(); err != nil {
		return queue.Settled{}, err
	}
	return q.restarts("the loop"), nil
}

// producerID is -1: kafka-go's Writer is not idempotent, and a Reader
// produces nothing; what the loop's own Writer sends goes to the one
// delivery running.
func (c *readerConsumer) producerID() int64 { return -1 }
