package twicekafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
)

// SaramaJob is a Kafka consumer written with sarama
// (github.com/IBM/sarama) checked as production runs it: its own
// sarama.ConsumerGroupHandler, unchanged, in a real sarama consumer group
// (sarama.NewConsumerGroup) that the harness builds for each delivery
// from a copy of cfg, joining group and running the loop sarama's
// documentation gives:
//
//	for ctx.Err() == nil {
//		if err := cg.Consume(ctx, []string{rec.Topic}, handler); err != nil { ... }
//	}
//
// newHandler builds the handler for each delivery from the delivery's
// connections (d.DB, d.DSN) and clock (d.Now), as the consumer's process
// builds it at start-up. cfg keeps what it says about committing
// (Consumer.Offsets.AutoCommit.Enable, sarama's default, or the handler's
// own session.Commit), its Version, its rebalance strategies and its
// Consumer.Offsets.Initial, which must be sarama.OffsetOldest: the
// harness produces the record before the group has a committed offset,
// and a group starting at the newest offset would never see it. Options
// SessionTimeout and RestartDelay apply; Group and CommitMode do not
// (group names the group, and cfg says how it commits). It runs on the
// in-process kfake cluster (BrokersEnv is refused).
//
// A delivery starts the group on a new client; the handler's ConsumeClaim
// reads the claim's records from claim.Messages() up to the delivery's
// record, after which that channel is closed, as sarama closes it on a
// rebalance, so a handler that ranges over it (or selects on it and
// returns when it is closed) returns once it has handled the record. Its
// returning is the delivery's end; its error is the delivery's. The
// session stays open until the delivery is settled. ConsumeClaim must
// return once claim.Messages() is closed (sarama's own example checks ok
// and returns): session.Context() is not done then, as it would be on a
// real rebalance, so one that waits for it instead hangs until the
// delivery's context ends, and one that takes the nil record fails. Its
// ack is what production's commit is:
//
//   - with autocommit, sarama's tick: session.Commit of the offsets the
//     handler marked (MarkMessage, MarkOffset). crash-before-ack is the
//     process dying before that tick; lost-ack a tick's commit lost,
//     which the commit sarama makes when the session ends (a rebalance
//     hands the partition on) makes good, as sarama's does.
//   - without it, the handler's own session.Commit: the ack reads the
//     group's committed offset; a handler that did not commit the record
//     gets it again after RestartDelay.
//
// A worker that dies is a client whose connections are all cut at once,
// and which can dial no more: it sends nothing further, no commit and no
// LeaveGroup, as a killed process. The coordinator then drops its member
// as its session timeout would (the harness evicts it at once; on the
// harness clock that is SessionTimeout). A live worker whose partition
// moves while it is still in its handler (visibility-timeout) is evicted
// the same way and its session's context ends, as on a rebalance; its
// later commit is refused by the coordinator. A handler that returns an
// error ends the session as sarama does (with autocommit, committing what
// it marked) and the record comes back after RestartDelay.
//
// Modelled: sarama's autocommit tick runs when the harness acks, never on
// the wall clock (AutoCommit.Interval is set far out in the copy), so a
// handler's marks are committed at the ack or when its session ends, not
// a second into its handling; a crash between a mark and the tick is a
// crash before the ack. The copy's fetches wait at most 100ms for records
// (Consumer.MaxWaitTime), so that a session ends sooner; its session
// timeout and heartbeats are cfg's. A delivery hands the handler the
// records before its own that the group has not committed (the original,
// for a producer's copy delivered before it was committed), in order, and
// none after its own. Records the handler produces with a sarama producer
// are not effects yet (Outbox takes a kgo producer), and a producer the
// handler builds itself does not reach the scenario's cluster.
func SaramaJob(name string, rec Record, group string, cfg *sarama.Config, newHandler func(d *harness.Delivery) sarama.ConsumerGroupHandler, opts ...Option) harness.Job {
	q := newQueue(name, rec, opts)
	q.opts.group = group
	q.sarama = &saramaSpec{cfg: cfg, newHandler: newHandler}
	return q.job(q.runSarama)
}

// saramaSpec is SaramaJob's: the consumer's own config and handler.
type saramaSpec struct {
	cfg        *sarama.Config
	newHandler func(d *harness.Delivery) sarama.ConsumerGroupHandler
}

// autoCommitInterval is the copy's AutoCommit.Interval: the tick is the
// harness's ack, never the wall clock's.
const autoCommitInterval = 24 * time.Hour

// check refuses a SaramaJob that cannot be checked, saying what to change.
func (sp *saramaSpec) check(name, group string) error {
	switch {
	case sp.newHandler == nil:
		return fmt.Errorf("twicekafka: job %q: SaramaJob's newHandler is nil; pass a func that builds the consumer's sarama.ConsumerGroupHandler from the delivery", name)
	case group == "":
		return fmt.Errorf("twicekafka: job %q: SaramaJob's group is empty; name the consumer group, as sarama.NewConsumerGroup is given it", name)
	case sp.cfg == nil:
		return fmt.Errorf("twicekafka: job %q: SaramaJob's cfg is nil; pass the consumer's *sarama.Config (sarama.NewConfig and its changes)", name)
	case sp.cfg.Version == (sarama.KafkaVersion{}):
		return fmt.Errorf("twicekafka: job %q: the sarama config has no Version (a Config not made by sarama.NewConfig?); set cfg.Version, e.g. sarama.V2_1_0_0, or start from sarama.NewConfig()", name)
	case sp.cfg.Consumer.Offsets.Initial == sarama.OffsetNewest:
		return fmt.Errorf("twicekafka: job %q: the sarama config's Consumer.Offsets.Initial is sarama.OffsetNewest (sarama.NewConfig's default): the group has no committed offset when the harness produces the record, so it would start after it and never hand it to the handler; set cfg.Consumer.Offsets.Initial = sarama.OffsetOldest", name)
	}
	if err := sp.cfg.Validate(); err != nil {
		return fmt.Errorf("twicekafka: job %q: the sarama config is invalid: %w", name, err)
	}
	return nil
}

// saramaConsumer is one delivery's sarama consumer group.
// Its process runs sarama's Consume loop, which runs the handler.
type saramaConsumer struct {
	process
	cg         sarama.ConsumerGroup
	net        *connSet
	autocommit bool

	handed, back         chan struct{} // closed once each
	handedOnce, backOnce sync.Once
	backErr              error // the handler's ConsumeClaim's, once back is closed
	release              chan struct{}
	releaseOnce          sync.Once

	// sess and member are guarded by the process's mu.
	sess   sarama.ConsumerGroupSession // the one holding the record
	member string
}

// stop ends the Consume loop (its session's context) and lets the
// session that holds the record end.
func (c *saramaConsumer) stop() {
	c.stopRun()
	c.releaseOnce.Do(func() { close(c.release) })
}

// kill is the worker's death: its connections are cut before anything
// else, so the session's end commits nothing and leaves no group.
func (c *saramaConsumer) kill() {
	if c.killed.Swap(true) {
		return
	}
	c.net.cut()
	c.shut()
	go func() {
		<-c.done
		_ = c.cg.Close()
	}()
}

// shut stops the loop once, and lets the session end.
func (c *saramaConsumer) shut() bool {
	if !c.process.shut() {
		return false
	}
	c.releaseOnce.Do(func() { close(c.release) })
	return true
}

// end is a graceful end, as the process's shutdown: the session ends as
// sarama ends it (Cleanup, and with autocommit the commit of what was
// marked), and Close leaves the group. It waits for that, at most
// pollTimeout, and then cuts the connections.
func (c *saramaConsumer) end() {
	if c.killed.Load() || !c.shut() {
		return
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		<-c.done
		_ = c.cg.Close()
	}()
	select {
	case <-ended:
	case <-time.After(pollTimeout):
		c.net.cut()
	}
}

// memberID is the consumer's member in the group, once it joined.
func (c *saramaConsumer) memberID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.member
}

// saramaHandler wraps the consumer's handler: it learns the session and
// hands the handler's ConsumeClaim the records up to the delivery's.
type saramaHandler struct {
	c    *saramaConsumer
	user sarama.ConsumerGroupHandler
}

// Setup learns the session's member, then runs the handler's Setup.
func (h saramaHandler) Setup(sess sarama.ConsumerGroupSession) (err error) {
	h.c.mu.Lock()
	h.c.member = sess.MemberID()
	h.c.mu.Unlock()
	defer recoverAs(&err, "Setup")
	return h.user.Setup(sess)
}

// Cleanup runs the handler's Cleanup.
func (h saramaHandler) Cleanup(sess sarama.ConsumerGroupSession) (err error) {
	defer recoverAs(&err, "Cleanup")
	return h.user.Cleanup(sess)
}

// ConsumeClaim runs the handler's ConsumeClaim on the claim's records up
// to the delivery's, and once it returned after it (or with an error),
// holds the session until the delivery is settled.
func (h saramaHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	c := h.c
	msgs := make(chan *sarama.ConsumerMessage)
	quit := make(chan struct{})
	forwarded := make(chan struct{})
	go func() {
		defer close(forwarded)
		defer close(msgs)
		c.forward(claim.Messages(), msgs, quit, sess)
	}()
	err := callConsumeClaim(h.user, sess, claimOf{claim, msgs})
	close(quit)
	<-forwarded
	select {
	case <-c.handed:
	default:
		if err == nil {
			return nil // the session ended before the record: sarama's loop joins again
		}
	}
	c.backOnce.Do(func() {
		c.backErr = err
		close(c.back)
	})
	<-c.release
	return err
}

// forward hands the handler the claim's records up to the delivery's,
// and stops after it.
func (c *saramaConsumer) forward(in <-chan *sarama.ConsumerMessage, out chan<- *sarama.ConsumerMessage, quit <-chan struct{}, sess sarama.ConsumerGroupSession) {
	for {
		var m *sarama.ConsumerMessage
		select {
		case got, ok := <-in:
			if !ok {
				return
			}
			m = got
		case <-quit:
			return
		}
		if m.Topic != c.topic || m.Partition != c.partition || m.Offset > c.offset {
			return
		}
		select {
		case out <- m:
		case <-quit:
			return
		}
		if m.Offset == c.offset {
			c.mu.Lock()
			c.sess = sess
			c.mu.Unlock()
			c.handedOnce.Do(func() { close(c.handed) })
			return
		}
	}
}

// claimOf is the claim the handler sees: sarama's, with the records the
// harness forwards.
type claimOf struct {
	sarama.ConsumerGroupClaim
	msgs chan *sarama.ConsumerMessage
}

// Messages is the records up to the delivery's; closed after it.
func (c claimOf) Messages() <-chan *sarama.ConsumerMessage { return c.msgs }

func callConsumeClaim(h sarama.ConsumerGroupHandler, sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) (err error) {
	defer recoverAs(&err, "ConsumeClaim")
	return h.ConsumeClaim(sess, claim)
}

// fetchSarama is Fetch for SaramaJob: every consumer in the group loses
// it (a dead one is killed and evicted, a live one ends its session or is
// evicted), a redrive resets the group's offset, and a new consumer group
// client gets the record unless the group's committed offset is past it.
func (q *kafkaQueue) fetchSarama(ctx context.Context, op queue.Op, s *scenario, partition int32, offset int64) (queue.Fetched, error) {
	if s.cluster == nil || s.dial == nil {
		return queue.Fetched{}, fmt.Errorf("twicekafka: internal: job %q: the scenario has no kfake cluster to dial", q.name)
	}
	if err := q.sarama.check(q.name, q.opts.group); err != nil {
		return queue.Fetched{}, err
	}
	open, ok := takeOver(s, &s.saramas, op.Now, q.opts.session)
	if !ok {
		return q.stillHeld(s, partition, "a consumer", "its ConsumeClaim has not returned since it got the record"), nil
	}
	for _, c := range open {
		switch {
		case c.killed.Load() || c.closed.Load() && c.returned.Load():
		case c.diedBeforeCommit(op):
			// Done with its record but never acked: it died before the
			// commit.
			c.kill()
		case c.returned.Load():
			// A lost ack: the partition moves, and the session's end
			// commits what sarama commits on it.
			c.end()
			continue
		default:
			// Still in its handler past its session: evicted, and its
			// session's context ends, as on a rebalance.
			c.stop()
		}
		if err := evict(ctx, s, c.memberID()); err != nil {
			return queue.Fetched{}, err
		}
	}
	adm := kadm.NewClient(s.producer)
	if err := redrive(ctx, adm, op, s, partition, offset); err != nil {
		return queue.Fetched{}, err
	}
	at, err := committedOffset(ctx, adm, s.group, s.topic, partition)
	if err != nil {
		return queue.Fetched{}, err
	}
	if at > offset {
		return passed(s, at, partition, offset), nil
	}
	c, err := q.newSaramaConsumer(s, partition, offset)
	if err != nil {
		return queue.Fetched{}, err
	}
	c.started = op.Now
	joined(s, &s.saramas, &s.allSaramas, c)
	return queue.Fetched{Delivered: true, Job: c}, nil
}

// evict takes a member out of the group as the coordinator does when its
// session ends: a LeaveGroup on its behalf.
func evict(ctx context.Context, s *scenario, member string) error {
	if member == "" {
		return nil // it never joined
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = s.group
	req.MemberID = member
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID = member
	req.Members = append(req.Members, m)
	resp, err := req.RequestWith(ctx, s.producer)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
		for _, m := range resp.Members {
			err = errors.Join(err, kerr.ErrorForCode(m.ErrorCode))
		}
	}
	if err != nil && !errors.Is(err, kerr.UnknownMemberID) {
		return fmt.Errorf("twicekafka: evicting member %q of group %q, as its session's end would: %w", member, s.group, err)
	}
	return nil
}

// newSaramaConsumer builds a delivery's consumer group from a copy of the
// consumer's config, dialing the scenario's cluster.
func (q *kafkaQueue) newSaramaConsumer(s *scenario, partition int32, offset int64) (*saramaConsumer, error) {
	d := &connSet{dial: s.dial, refusal: errors.New("twicekafka: the worker was killed: its process dials no more")}
	cfg := *q.sarama.cfg
	cfg.Net.Proxy.Enable = true
	cfg.Net.Proxy.Dialer = d
	cfg.Consumer.Offsets.AutoCommit.Interval = autoCommitInterval
	// A fetch waits for records at most this long (sarama's default is
	// 500ms): a session's end waits for it.
	cfg.Consumer.MaxWaitTime = 100 * time.Millisecond
	cg, err := sarama.NewConsumerGroup(s.cluster.ListenAddrs(), s.group, &cfg)
	if err != nil {
		d.cut()
		return nil, fmt.Errorf("twicekafka: job %q: sarama.NewConsumerGroup from the consumer's config on the kfake cluster: %w", q.name, err)
	}
	c := &saramaConsumer{process: newProcess(s.topic, partition, offset), cg: cg, net: d,
		autocommit: cfg.Consumer.Offsets.AutoCommit.Enable,
		handed:     make(chan struct{}), back: make(chan struct{}), release: make(chan struct{})}
	go c.serve()
	if cfg.Consumer.Return.Errors {
		// The process reads them (or sarama blocks); they are its logs.
		go func() {
			for range cg.Errors() {
			}
		}()
	}
	return c, nil
}

// runSarama is a SaramaJob delivery: sarama's Consume loop runs the
// handler until its ConsumeClaim returned after the record, the loop
// returns, or the delivery dies.
func (q *kafkaQueue) runSarama(ctx context.Context, d *harness.Delivery) error {
	c, ok := d.Queued.(*saramaConsumer)
	if !ok || c == nil {
		return fmt.Errorf("twicekafka: job %q, delivery %d of %s: the delivery carries no sarama consumer (%T); run it through twicekafka.SaramaJob", q.name, d.Attempt, d.JobID, d.Queued)
	}
	h := q.sarama.newHandler(d)
	if h == nil {
		c.kill()
		return fmt.Errorf("twicekafka: job %q, delivery %d of %s: newHandler returned a nil sarama.ConsumerGroupHandler", q.name, d.Attempt, d.JobID)
	}
	if !c.run(ctx, d, func(ctx context.Context) error { return consumeLoop(ctx, c.cg, c.topic, saramaHandler{c: c, user: h}) }) {
		return fmt.Errorf("twicekafka: job %q, delivery %d: its consumer was closed before it ran", q.name, d.Attempt)
	}
	wait := time.NewTimer(pollTimeout)
	defer wait.Stop()
	select {
	case <-c.handed:
	case <-c.back:
		c.returned.Store(true)
		return c.backErr
	case <-c.done:
		c.end()
		return fmt.Errorf("twicekafka: job %q, delivery %d: sarama's Consume loop returned before the handler's ConsumeClaim got record %s: %w", q.name, d.Attempt, d.JobID, c.err)
	case <-ctx.Done():
		c.kill()
		return ctx.Err()
	case <-wait.C:
		c.kill()
		return fmt.Errorf("twicekafka: job %q, delivery %d: the handler's ConsumeClaim did not take record %s from claim.Messages() within %v: does it read claim.Messages()?", q.name, d.Attempt, d.JobID, pollTimeout)
	}
	select {
	case <-c.back:
		c.returned.Store(true)
		return c.backErr
	case <-c.done:
		c.returned.Store(true)
		return fmt.Errorf("twicekafka: job %q, delivery %d: sarama's Consume loop returned while the handler had record %s: %w", q.name, d.Attempt, d.JobID, c.err)
	case <-ctx.Done():
		c.kill()
		return ctx.Err()
	}
}

// consumeLoop is the loop sarama's documentation gives a consumer group:
// Consume again after each session, until the context ends. An error is
// the process's end, as sarama's example exits on it.
func consumeLoop(ctx context.Context, cg sarama.ConsumerGroup, topic string, h sarama.ConsumerGroupHandler) error {
	for ctx.Err() == nil {
		err := cg.Consume(ctx, []string{topic}, h)
		switch {
		case ctx.Err() != nil || errors.Is(err, sarama.ErrClosedConsumerGroup):
			return nil
		case err != nil:
			return fmt.Errorf("sarama's Consume: %w", err)
		}
	}
	return nil
}

// ackSarama is the commit production makes once the handler is done with
// the record: sarama's autocommit tick, or, without autocommit, the
// handler's own, read back from the group. Then the session ends and the
// consumer leaves, as its process's shutdown.
func (q *kafkaQueue) ackSarama(ctx context.Context, op queue.Op, c *saramaConsumer) (queue.Settled, error) {
	c.acked.Store(true)
	defer c.end()
	c.mu.Lock()
	sess := c.sess
	c.mu.Unlock()
	if c.autocommit && sess != nil {
		sess.Commit() // sarama's tick: a refusal leaves the offset where it was
	}
	how, why := "the handler committed", ": the handler did not commit it (session.Commit after MarkMessage, with autocommit disabled)"
	if c.autocommit {
		how, why = "sarama's autocommit committed", ": the handler did not mark it (session.MarkMessage), or the coordinator refused the commit"
	}
	return q.readBack(ctx, op, &c.process, how, why)
}

// nackSarama is a ConsumeClaim that returned an error: its session ends
// as sarama ends it, the process exits on the error and restarts; the
// next Fetch reads what the group committed.
func (q *kafkaQueue) nackSarama(c *saramaConsumer) (queue.Settled, error) {
	c.end()
	return q.restarts("the handler's ConsumeClaim"), nil
}

// producerID is -1: a consumer group produces nothing; what the
// handler's own producer sends goes to the one delivery running.
func (c *saramaConsumer) producerID() int64 { return -1 }
