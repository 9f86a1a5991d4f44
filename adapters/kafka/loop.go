package twicekafka

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
)

// Loop is a consumer's poll loop as production writes it: it polls cl
// (PollFetches, PollRecords), handles what each poll returns and commits
// as it commits in production (CommitRecords before or after its writes,
// MarkCommitRecords, or kgo's autocommit), until ctx is done or the
// client is closed, and then returns.
type Loop func(ctx context.Context, cl *kgo.Client) error

// LoopJob is a Kafka consumer checked as production writes it: its own
// poll loop, run unchanged on a client the harness builds from the
// consumer's own options (clientOpts: its kgo.ConsumerGroup,
// kgo.ConsumeTopics, kgo.DisableAutoCommit or kgo's autocommit,
// kgo.AutoCommitMarks, kgo.OnPartitionsRevoked) with the scenario's seed
// brokers and dialer added. newLoop builds the loop for each delivery
// from the delivery's connections and clock, as the consumer's process
// builds it at start-up. The options must name a group and consume
// rec.Topic; the in-process kfake cluster runs it (BrokersEnv is refused).
//
// A delivery starts the loop on a new client in the group; it ends when
// the loop, having been handed the record by a poll, polls again (it is
// done with the record), or returns. Its ack is what production's commit
// is:
//
//   - with autocommit, kgo's tick: the offsets the loop had polled when
//     it polled again (CommitOffsetsSync of UncommittedOffsets, as the
//     tick commits), or the marked ones with AutoCommitMarks.
//     crash-before-ack is the process dying before that tick; lost-ack
//     a tick's commit lost, which the worker's later commit on revoke
//     makes good, as kgo's does.
//   - with DisableAutoCommit, the loop's own commits: the ack reads the
//     group's committed offset; a loop that did not commit the record
//     gets it again after RestartDelay.
//
// A worker that dies is a client whose context is cancelled and closed:
// it sends nothing more, no commit and no LeaveGroup, as a killed
// process; the group hands its partition on at once (its session on the
// harness clock, SessionTimeout). A live worker that loses the partition
// (a rebalance, a lost ack's redelivery) leaves the group as kgo does,
// committing on revoke what kgo commits. A loop that returns an error is
// a process that exits on it: its client is closed and the record comes
// back after RestartDelay.
//
// Modelled: one poll may hand the loop the record together with a
// producer's copy after it (Kafka batches them), in which case the loop
// handles both in that delivery and the copy's own delivery finds it
// committed. After the delivery's record the loop's polls return nothing
// more (its topic is paused) until the delivery ends.
//
// Every record produced to the cluster while the loop runs, by any
// client, is an effect of the delivery, of kind "kafka:" and its topic
// (payload as Outbox's), seen where the broker takes it, and a step: a
// crash just before it leaves the broker without it, one right after
// leaves it there. The loop's client may create the topics it produces
// to (kgo.AllowAutoTopicCreation), as they exist in production. A record
// is the delivery's whose client sent it (by its ProducerID); one from a
// client the loop made itself is the delivery's that runs then, and no
// one's while two run (a rebalance moved the partition from one still
// handling its record).
func LoopJob(name string, rec Record, clientOpts []kgo.Opt, newLoop func(d *harness.Delivery) Loop, opts ...Option) harness.Job {
	q := newQueue(name, rec, opts)
	q.loop = &loopSpec{opts: slices.Clone(clientOpts)}
	return q.job(func(ctx context.Context, d *harness.Delivery) error { return q.runLoop(ctx, d, newLoop) })
}

// deadSession is the wall-clock session of a LoopJob client: a killed
// worker sends no LeaveGroup (that would commit what kgo commits on
// revoke), so the group drops it when its session ends, which the
// harness clock counts as SessionTimeout.
const deadSession = time.Second

// loopSpec is LoopJob's: the consumer's own client options.
type loopSpec struct{ opts []kgo.Opt }

// loopConsumer is one delivery's client in LoopJob: the loop runs on it.
type loopConsumer struct {
	process
	cl         *kgo.Client
	crash      context.CancelFunc // the client's own context: cancelled, it sends nothing
	autocommit bool
	marks      bool

	handed, back       chan struct{} // closed once each
	handedOnce, backOn sync.Once
	head               map[string]map[int32]kgo.EpochOffset // polled when it polled again

	pid int64 // the client's ProducerID (clientPID)
}

// hooks are the client's hooks that tell the delivery where the loop is.
type hooks struct{ c *loopConsumer }

// OnFetchRecordUnbuffered sees the record the delivery is for handed to
// the loop by a poll.
func (h hooks) OnFetchRecordUnbuffered(r *kgo.Record, polled bool) {
	if polled && r.Topic == h.c.topic && r.Partition == h.c.partition && r.Offset == h.c.offset {
		h.c.handedOnce.Do(func() { close(h.c.handed) })
	}
}

// OnPollStart sees the loop poll again once it had the record: it is done
// with it. What it had polled is what kgo's tick commits; its topic is
// paused, so this poll waits for the end of the delivery.
func (h hooks) OnPollStart(ctx context.Context) {
	c := h.c
	if ctx == nil { // Close's own poll
		return
	}
	select {
	case <-c.handed:
	default:
		return
	}
	c.backOn.Do(func() {
		c.head = c.cl.UncommittedOffsets()
		c.cl.PauseFetchTopics(c.topic)
		close(c.back)
	})
}

// kill is the worker's death: its client sends nothing more, and the
// loop's context ends.
func (c *loopConsumer) kill() {
	if c.killed.Swap(true) {
		return
	}
	c.crash()
	c.end()
}

// leave takes a live worker's client out of the group as kgo does
// (committing on revoke what it commits). A loop done with its record
// ends; one still handling it goes on, as a consumer that lost its
// partition in a rebalance does, and finds out when it commits.
func (c *loopConsumer) leave() {
	if c.killed.Load() || c.closed.Load() {
		return
	}
	c.cl.LeaveGroup()
	if c.returned.Load() {
		c.end()
	}
}

// end stops the loop and closes the client, once.
func (c *loopConsumer) end() {
	if !c.shut() {
		return
	}
	go func() {
		<-c.done
		c.cl.Close()
	}()
}

// fetchLoop is Fetch for LoopJob: every consumer in the group loses it
// (a dead one is killed, a live one leaves), a redrive resets the group's
// offset, and a new client in the group gets the record unless the
// group's committed offset is past it.
func (q *kafkaQueue) fetchLoop(ctx context.Context, op queue.Op, s *scenario, partition int32, offset int64) (queue.Fetched, error) {
	// One that has not polled again since its record keeps the partition
	// until it is evicted for its poll interval: on the harness clock,
	// SessionTimeout (holding).
	open, ok := takeOver(s, &s.loops, op.Now, q.opts.session)
	if !ok {
		return q.stillHeld(s, partition, "a consumer", "it has not polled again since its record"), nil
	}
	for _, c := range open {
		if c.diedBeforeCommit(op) {
			c.kill()
			continue
		}
		c.leave()
	}
	adm := kadm.NewClient(s.producer)
	if err := redrive(ctx, adm, op, s, partition, offset); err != nil {
		return queue.Fetched{}, err
	}
	c, err := q.newLoopConsumer(s, partition, offset)
	if err != nil {
		return queue.Fetched{}, err
	}
	c.started = op.Now
	at, err := committedOffset(ctx, adm, s.group, s.topic, partition)
	if err != nil {
		c.kill()
		return queue.Fetched{}, err
	}
	if at > offset {
		c.kill() // it never joined the group
		return passed(s, at, partition, offset), nil
	}
	joined(s, &s.loops, &s.allLoops, c)
	return queue.Fetched{Delivered: true, Job: c}, nil
}

// newLoopConsumer builds a delivery's client from the consumer's options
// and the scenario's brokers, and learns its group and commit mode.
func (q *kafkaQueue) newLoopConsumer(s *scenario, partition int32, offset int64) (*loopConsumer, error) {
	crashCtx, crash := context.WithCancel(context.Background())
	c := &loopConsumer{process: newProcess(s.topic, partition, offset), crash: crash,
		handed: make(chan struct{}), back: make(chan struct{})}
	go c.serve()
	opts := append(slices.Clone(q.loop.opts), s.base...)
	// The topics the loop produces to exist in production; on the fresh
	// cluster its first record creates each.
	opts = append(opts, kgo.WithContext(crashCtx), kgo.WithHooks(hooks{c}), kgo.AllowAutoTopicCreation(),
		kgo.SessionTimeout(deadSession), kgo.HeartbeatInterval(deadSession/10))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		crash()
		return nil, fmt.Errorf("twicekafka: job %q: a client from the consumer's options: %w", q.name, err)
	}
	c.cl = cl
	c.pid = clientPID(cl)
	group, _ := cl.OptValue(kgo.ConsumerGroup).(string)
	topics, _ := cl.OptValue(kgo.ConsumeTopics).([]string)
	switch {
	case group == "":
		c.kill()
		return nil, fmt.Errorf("twicekafka: job %q: the consumer's options name no group (kgo.ConsumerGroup); LoopJob checks a group consumer", q.name)
	case !slices.Contains(topics, q.rec.Topic):
		c.kill()
		return nil, fmt.Errorf("twicekafka: job %q: the consumer's options consume %q (kgo.ConsumeTopics), not the record's topic %q", q.name, topics, q.rec.Topic)
	}
	s.group = group
	disabled, _ := cl.OptValue(kgo.DisableAutoCommit).(bool)
	c.autocommit = !disabled
	c.marks, _ = cl.OptValue(kgo.AutoCommitMarks).(bool)
	return c, nil
}

// runLoop is a LoopJob delivery: the loop runs on the delivery's client
// until it is done with the record, returns, or the delivery dies.
func (q *kafkaQueue) runLoop(ctx context.Context, d *harness.Delivery, newLoop func(*harness.Delivery) Loop) error {
	c, ok := d.Queued.(*loopConsumer)
	if !ok || c == nil {
		return fmt.Errorf("twicekafka: job %q, delivery %d of %s: the delivery carries no Kafka consumer (%T); run it through twicekafka.LoopJob", q.name, d.Attempt, d.JobID, d.Queued)
	}
	loop := newLoop(d)
	if loop == nil {
		return fmt.Errorf("twicekafka: job %q, delivery %d of %s: newLoop returned a nil Loop", q.name, d.Attempt, d.JobID)
	}
	if !c.run(ctx, d, func(ctx context.Context) error { return loop(ctx, c.cl) }) {
		return fmt.Errorf("twicekafka: job %q, delivery %d: its consumer was closed before it ran", q.name, d.Attempt)
	}
	done := c.done
	wait := time.NewTimer(pollTimeout)
	defer wait.Stop()
	select {
	case <-c.handed:
	case <-done:
		c.end()
		return fmt.Errorf("twicekafka: job %q, delivery %d: the consumer's loop returned before a poll handed it record %s: %w", q.name, d.Attempt, d.JobID, c.err)
	case <-ctx.Done():
		c.kill()
		return ctx.Err()
	case <-wait.C:
		c.kill()
		return fmt.Errorf("twicekafka: job %q, delivery %d: no poll of the consumer's loop handed it record %s within %v: does it poll the client it is given?", q.name, d.Attempt, d.JobID, pollTimeout)
	}
	select {
	case <-c.back:
		c.returned.Store(true)
		return nil
	case <-done:
		c.returned.Store(true)
		return c.err
	case <-ctx.Done():
		c.kill()
		return ctx.Err()
	}
}

// ackLoop is the commit production makes once the loop is done with the
// record: kgo's autocommit tick, or, without autocommit, the loop's own
// commit read back from the group.
func (q *kafkaQueue) ackLoop(ctx context.Context, op queue.Op, c *loopConsumer) (queue.Settled, error) {
	c.acked.Store(true)
	defer c.end()
	how := "the loop committed"
	if c.autocommit {
		how = "kgo's autocommit committed"
		var cerr error
		if c.marks {
			cerr = c.cl.CommitMarkedOffsets(ctx)
		} else {
			c.cl.CommitOffsetsSync(ctx, c.head, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) { cerr = err })
		}
		if cerr != nil {
			return queue.Settled{Outcome: queue.Retry, After: q.opts.restart, Detail: fmt.Sprintf("kgo's autocommit refused: %v", cerr)}, nil
		}
	}
	return q.readBack(ctx, op, &c.process, how, " (the loop commits nothing for it, or marks nothing with AutoCommitMarks)")
}

// nackLoop is a loop that returned an error: the process exits, closing
// its client as kgo's Close does, and restarts.
func (q *kafkaQueue) nackLoop(c *loopConsumer) (queue.Settled, error) {
	c.end()
	return q.restarts("the loop"), nil
}
