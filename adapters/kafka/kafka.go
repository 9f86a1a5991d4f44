// Package twicekafka checks Kafka consumers' per-record handlers with
// twice, as franz-go (github.com/twmb/franz-go) runs them: the harness
// produces the record with a real kgo producer into a topic on an
// in-process kfake cluster (github.com/twmb/franz-go/pkg/kfake, the Kafka
// wire protocol in Go, one cluster per scenario), each delivery is a
// real kgo consumer that joins the consumer group and polls the record
// from the group's committed offset, and the offset is committed with
// kgo's CommitRecords as production commits it.
//
//	func TestRecordOrder(t *testing.T) {
//		harness.Check(t, twicekafka.Job("record-order",
//			twicekafka.Record{Topic: "orders", Key: []byte("order-9812"), Value: []byte(`{"id":9812}`)},
//			func(d *harness.Delivery, cl *kgo.Client) twicekafka.Handler {
//				return orders.Consumer{DB: d.DB}.Handle
//			}),
//			harness.Config{Setup: []harness.Setup{harness.SQL(orders.Schema)}})
//	}
//
// What each of twice's faults is for Kafka:
//
//   - crash-before-ack: the handler's writes are done and the worker dies
//     before its offset commit; after the group's session timeout
//     (SessionTimeout, 45s as franz-go's) the partition goes to a new
//     consumer, which polls the record again from the committed offset.
//   - lost-ack: the commit never reaches the group (a lost OffsetCommit
//     reply, or one the coordinator dropped); the worker lives on, and
//     the record comes back when the partition next moves (a restart, a
//     rebalance), from the committed offset.
//   - crash-mid-job: the worker dies before the handler's statement k; its
//     open transaction rolls back, and the record comes back as after a
//     crash before the commit. A handler that committed the offset itself
//     before its write (CommitInHandler) finds the record gone: lost work.
//   - visibility-timeout, concurrent-delivery: a rebalance hands the
//     partition to a second consumer while the first is still in the
//     handler: the first consumer leaves the group (as one whose session
//     or poll interval ran out is evicted), the second joins and polls the
//     record from the committed offset, and the first's later commit is
//     refused by the coordinator (UNKNOWN_MEMBER_ID), as Kafka refuses a
//     commit from a member it no longer knows.
//   - producer-retry: the producer sends the record again: a new offset,
//     the same key, value and headers. The group's committed offset after
//     the first record does not cover it, so the consumer handles it.
//     With the producer's own code (Produce), each send runs it at the
//     send's time, and late-producer-retry sends the copy after the
//     producer's timeout.
//   - redrive: a person resets the group's offset to the record's (kadm's
//     CommitOffsets, with the group empty), and a consumer polls it again.
//   - effect faults: records the handler produces, through Outbox or on
//     the client it was given (seen where the in-process cluster takes
//     them), are effects, each a step: a crash falls just before one or
//     right after the broker took it, and a record produced twice is a
//     duplicate. A record produced inside a Kafka transaction
//     (CommitTransactional) is not: its fate is the transaction's.
//
// How the offset is committed is CommitMode's: after the handler returned
// nil (CommitRecords, the default), by the handler itself
// (CommitInHandler: CommitRecords before or after its write), or in
// Kafka's exactly-once loop (CommitTransactional: a GroupTransactSession
// whose End commits the records the handler produced with the offset;
// PostgreSQL stays outside that transaction).
//
// What is real and what is modelled: the producer, the consumer group's
// join, its assignment and rebalance, the fetch from the committed offset,
// and the commit (and its refusal) are franz-go's and kfake's own code.
// Modelled: a delivery handles one record (its consumer polls one record
// at a time), so a consumer handed records before the one the harness
// delivers (a copy still uncommitted) skips them (Kafka would hand them to
// the handler first; their own deliveries cover them), and its commit
// covers them, as any later offset's does; a dead worker leaves the group at once (LeaveGroup) instead
// of after its session timeout on the wall clock, which the harness clock
// stands for (Rules.Redeliver); a handler's error is taken as the
// production loop's returning it: the consumer leaves without committing
// and the record comes back from the committed offset after RestartDelay.
//
// A consumer's own poll loop is checked as written too: LoopJob runs a
// franz-go loop on a kgo client from its options, and ReaderJob a
// segmentio/kafka-go loop on a *kafka.Reader from its kafka.ReaderConfig.
//
// With TWICE_KAFKA_BROKERS (BrokersEnv) set, the scenarios run on those
// brokers instead, each on a topic and a group of its own.
//
// LoopJob checks a franz-go consumer's own poll loop, and SaramaJob a
// sarama (github.com/IBM/sarama) consumer group handler, each unchanged
// and on the client library's own consumer group, on the kfake cluster.
//
// Offsets are not steps: a crash or a lost reply falls on the handler's
// statements and effects, and on the commit only through the ack.
//
// README.md in this directory (github.com/runtwice/twice/adapters/kafka) has
// the versions this adapter is tested on, its example and what each
// fault found there, and how to use it from a clone.
package twicekafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/internal/redact"
)

// DefaultSessionTimeout is franz-go's default group session timeout
// (kgo.SessionTimeout): how long after a worker died the group hands its
// partition to another consumer.
const DefaultSessionTimeout = 45 * time.Second

// DefaultRestartDelay is how long after a handler's error its consumer
// polls the record again, as a process that exits on the error and is
// restarted.
const DefaultRestartDelay = time.Second

// pollTimeout bounds a delivery's wait for its record on the wall clock:
// the record is known to be in the partition, so a poll that finds
// nothing in this time is the adapter's error, not the handler's.
const pollTimeout = 10 * time.Second

// Handler is a consumer's per-record handler as production writes it:
// the function its poll loop calls for each record (inside
// Fetches.EachRecord), before the loop commits the record's offset.
type Handler func(ctx context.Context, r *kgo.Record) error

// Record is what the producer sends: the record every delivery of the
// job handles.
type Record struct {
	// Topic is the record's topic; the consumer group consumes it.
	// Required.
	Topic string
	// Key, Value and Headers are the record's, as produced.
	Key, Value []byte
	Headers    []kgo.RecordHeader
}

// Commit is how the consumer commits the record's offset.
type Commit int

// Commits.
const (
	// CommitAfterHandler commits with kgo's CommitRecords once the handler
	// returned nil, as a loop that handles a record and then commits it
	// (with autocommit disabled). The commit is the delivery's ack, so
	// crash-before-ack and lost-ack withhold it.
	CommitAfterHandler Commit = iota
	// CommitInHandler leaves the commit to the handler, which calls
	// CommitRecords (or CommitUncommittedOffsets) on the
	// client it was built with, wherever production calls it: before its
	// write, after it. Nothing is committed for it after it returns. The
	// commit is not a step: a Fetch or Ack made while another delivery's
	// handler runs is recorded as a race (result.SettledBeside), since
	// that handler may or may not have committed yet, and a pass with
	// one is run again.
	CommitInHandler
	// CommitTransactional is Kafka's exactly-once consume-transform-produce
	// (kgo.GroupTransactSession): the consumer reads committed records
	// only, a transaction begins after the poll, the records the handler
	// produces on its client are in it, and the ack is the session's
	// End(TryCommit), which commits them with the record's offset; a
	// handler's error aborts it (TryAbort). PostgreSQL is outside the
	// transaction: a write the handler made there stays when Kafka aborts.
	CommitTransactional
)

var commitNames = [...]string{CommitAfterHandler: "commit after the handler", CommitInHandler: "the handler commits", CommitTransactional: "transactional"}

func (c Commit) String() string {
	if c < 0 || int(c) >= len(commitNames) {
		return fmt.Sprintf("Commit(%d)", int(c))
	}
	return commitNames[c]
}

// Option changes how a Kafka consumer is checked.
type Option func(*options)

type options struct {
	group   string
	commit  Commit
	session time.Duration
	restart time.Duration
	produce func(context.Context, Producing) error // Produce's
}

// Group is the consumer group's name; without it, "twice-" and the job's
// name.
func Group(name string) Option { return func(o *options) { o.group = name } }

// CommitMode says how the consumer commits offsets; without it,
// CommitAfterHandler.
func CommitMode(c Commit) Option { return func(o *options) { o.commit = c } }

// SessionTimeout is the group's session timeout (kgo.SessionTimeout): on
// the harness clock, how long after a delivery started the partition
// moves to another consumer when the first did not commit. Without it,
// DefaultSessionTimeout.
func SessionTimeout(d time.Duration) Option { return func(o *options) { o.session = d } }

// RestartDelay is how long after a handler's error the record is polled
// again; without it, DefaultRestartDelay.
func RestartDelay(d time.Duration) Option { return func(o *options) { o.restart = d } }

// Job is a Kafka consumer for harness.Check, harness.Run and
// harness.Explore: rec is the record the producer sends, and newHandler
// builds the per-record handler for each delivery from the delivery's
// connections (d.DB, d.DSN) and clock (d.Now), and the delivery's own
// consumer client cl (for a handler that commits itself), as the
// consumer's process would at start-up.
func Job(name string, rec Record, newHandler func(d *harness.Delivery, cl *kgo.Client) Handler, opts ...Option) harness.Job {
	q := newQueue(name, rec, opts)
	return q.job(func(ctx context.Context, d *harness.Delivery) error { return q.handle(ctx, d, newHandler) })
}

// newQueue is the queue of every face's job: its options over the
// defaults. A face whose consumer names its own group sets it after.
func newQueue(name string, rec Record, opts []Option) *kafkaQueue {
	o := options{group: "twice-" + name, session: DefaultSessionTimeout, restart: DefaultRestartDelay}
	for _, opt := range opts {
		opt(&o)
	}
	return &kafkaQueue{name: name, rec: rec, opts: o}
}

// job is the harness.Job whose deliveries handle runs on q.
func (q *kafkaQueue) job(handle harness.Handler) harness.Job {
	return harness.Job{Name: q.name, Queue: q, Handler: handle}
}

// kafkaQueue is the consumer group's bookkeeping for one job, as a
// queue.Queue. Scenarios run in parallel on one queue, each on a kfake
// cluster of its own, found by the scenario's database name.
type kafkaQueue struct {
	name string
	rec  Record
	opts options
	loop *loopSpec // LoopJob's; nil for Job
	// sarama is SaramaJob's; nil for Job and LoopJob.
	sarama *saramaSpec

	reader *readerSpec // ReaderJob's; nil for Job

	mu        sync.Mutex
	scenarios map[string]*scenario // database name -> its cluster
}

// scenario is one scenario's Kafka: its cluster and producer, and the
// consumers its deliveries opened that are still in the group.
type scenario struct {
	db       string
	cluster  *kfake.Cluster // nil on the user's brokers
	base     []kgo.Opt      // how a client reaches the brokers
	producer *kgo.Client
	// topic and group are the record's topic and the consumer group: the
	// job's own on a kfake cluster, with a suffix of the scenario's on the
	// user's brokers.
	topic, group string

	// seen keeps what the producer's code sends (Produce); ownProducer
	// is the harness producer's ProducerID plus one, once known: its
	// records are the job's copies, never a delivery's effects.
	seen        *producerSeen
	ownProducer atomic.Int64

	mu   sync.Mutex
	open []*consumer // in the group
	all  []*consumer // every consumer made, closed with the cluster
	// loops and allLoops are LoopJob's consumers, as open and all.
	loops, allLoops []*loopConsumer
	// runners are every consumer made, in order: what watchProduces
	// attributes a produced record to.
	runners []runner
	// readers and allReaders are ReaderJob's, as open and all.
	readers, allReaders []*readerConsumer
	// dial reaches the kfake cluster's in-memory network; nil on the
	// user's brokers.
	dial func(ctx context.Context, network, address string) (net.Conn, error)
	// saramas and allSaramas are SaramaJob's consumers, as open and all.
	saramas, allSaramas []*saramaConsumer
}

// consumer is one delivery's consumer: its client and the record it
// polled. It is what Fetch hands out (Delivery.Queued).
type consumer struct {
	Client *kgo.Client
	Record *kgo.Record

	sess *kgo.GroupTransactSession // CommitTransactional's
	poll func(context.Context) kgo.Fetches

	// mu guards what watchProduces reads: the delivery whose handler
	// runs on the consumer, its context, and its Outbox sends in flight.
	mu      sync.Mutex
	d       *harness.Delivery
	ctx     context.Context
	running bool
	outbox  int

	pid int64 // the client's ProducerID (clientPID)

	left, closed atomic.Bool
}

// leave takes the consumer out of the group, without committing; its
// client stays usable, so a handler still running finds out as Kafka
// tells it (a commit refused).
func (c *consumer) leave() {
	if c.left.CompareAndSwap(false, true) {
		c.Client.LeaveGroup() // autocommit is disabled: leaving commits nothing
	}
}

// close leaves the group and closes the client.
func (c *consumer) close() {
	c.leave()
	if c.closed.CompareAndSwap(false, true) {
		if c.sess != nil {
			c.sess.Close()
			return
		}
		c.Client.Close()
	}
}

var clusterSeq atomic.Int64

// BrokersEnv names the environment variable that points the checks at
// the user's own Kafka brokers (comma-separated host:port) instead of an
// in-process kfake cluster per scenario.
const BrokersEnv = "TWICE_KAFKA_BROKERS"

// newScenario gives a scenario its Kafka: a fresh kfake cluster with the
// record's topic, on an in-memory network of its own, or a topic and a
// group of its own on the brokers BrokersEnv names.
func (q *kafkaQueue) newScenario(ctx context.Context, db string) (*scenario, error) {
	if brokers := os.Getenv(BrokersEnv); brokers != "" {
		if q.reader != nil {
			return nil, fmt.Errorf("%s is set, but ReaderJob runs on an in-process kfake cluster only (the Reader's config names its topic and group, which scenarios on shared brokers cannot share); unset it for this check", BrokersEnv)
		}
		if q.sarama != nil {
			return nil, fmt.Errorf("%s is set, but SaramaJob runs on an in-process kfake cluster only (its clients dial the cluster's virtual network, and a killed worker's connections are cut there); unset it for this check", BrokersEnv)
		}
		if q.loop != nil {
			// The loop's options name its topic and group; on shared
			// brokers each scenario needs its own.
			return nil, fmt.Errorf("%s is set, but LoopJob runs on an in-process kfake cluster only (the loop's own options name its topic and group, which scenarios on shared brokers cannot share); unset it for this check", BrokersEnv)
		}
		return q.remoteScenario(ctx, db, strings.Split(brokers, ","))
	}
	vn := &kfake.VirtualNetwork{}
	c, err := kfake.NewCluster(kfake.ListenFn(vn.Listen), kfake.NumBrokers(1), kfake.Ports(9092),
		kfake.ClusterID("twice-"+strconv.FormatInt(clusterSeq.Add(1), 10)), kfake.SeedTopics(1, q.rec.Topic), kfake.AllowAutoTopicCreation(),
		kfake.GroupMinSessionTimeout(deadSession/2))
	if err != nil {
		return nil, fmt.Errorf("starting an in-process kfake cluster: %w", err)
	}
	base := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.Dialer(vn.DialContext)}
	seen := &producerSeen{}
	// The producer's code (Produce) may send to topics of its own, which
	// exist in production: its first record creates each.
	p, err := kgo.NewClient(append(base, kgo.WithHooks(seen), kgo.AllowAutoTopicCreation())...)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("a kgo producer on the kfake cluster: %w", err)
	}
	s := &scenario{db: db, cluster: c, base: base, producer: p, seen: seen, topic: q.rec.Topic, group: q.opts.group, dial: vn.DialContext}
	s.watchProduces(c)
	return s, nil
}

// remoteScenario makes the scenario's topic (one partition) and names its
// group on the user's brokers. The handler sees the topic's suffixed
// name: a column that stores it differs between clean runs and is left
// out of the comparison as volatile.
func (q *kafkaQueue) remoteScenario(ctx context.Context, db string, brokers []string) (*scenario, error) {
	// Database names are reused once a scenario is done with one.
	suffix := fmt.Sprintf("-twice-%s-%d", db, clusterSeq.Add(1))
	base := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	seen := &producerSeen{}
	p, err := kgo.NewClient(append(base, kgo.WithHooks(seen))...)
	if err != nil {
		return nil, fmt.Errorf("a kgo producer on %s=%s: %s", BrokersEnv, redact.Value(BrokersEnv, strings.Join(brokers, ",")), redact.Env().String(err.Error()))
	}
	topic := q.rec.Topic + suffix
	resp, err := kadm.NewClient(p).CreateTopic(ctx, 1, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("creating topic %q on %s=%s (unset it to use an in-process kfake cluster): %s", topic, BrokersEnv, redact.Value(BrokersEnv, strings.Join(brokers, ",")), redact.Env().String(err.Error()))
	}
	return &scenario{db: db, base: base, producer: p, seen: seen, topic: topic, group: q.opts.group + suffix}, nil
}

func (s *scenario) close() {
	s.mu.Lock()
	all, loops, readers, saramas := s.all, s.allLoops, s.allReaders, s.allSaramas
	s.open, s.all, s.loops, s.allLoops, s.readers, s.allReaders, s.runners = nil, nil, nil, nil, nil, nil, nil
	s.saramas, s.allSaramas = nil, nil
	s.mu.Unlock()
	for _, c := range saramas {
		c.kill()
	}
	for _, c := range readers {
		c.kill()
		_ = c.wait()
	}
	for _, c := range all {
		c.close()
	}
	for _, c := range loops {
		c.kill()
	}
	if s.cluster != nil {
		s.producer.Close()
		s.cluster.Close()
		return
	}
	// The user's brokers keep nothing of a finished scenario.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm := kadm.NewClient(s.producer)
	_, _ = adm.DeleteGroup(ctx, s.group)
	_, _ = adm.DeleteTopic(ctx, s.topic)
	s.producer.Close()
}

// clientOpts are the options of a client on the scenario's brokers.
func (s *scenario) clientOpts(more ...kgo.Opt) []kgo.Opt {
	return append(append([]kgo.Opt(nil), s.base...), more...)
}

// Schema is zero: the queue's storage is the kfake cluster.
func (q *kafkaQueue) Schema() queue.Schema { return queue.Schema{} }

// Rules are the group's session timeout; Kafka keeps nothing in
// PostgreSQL and refuses no copy of a record.
//
// A LoopJob's, ReaderJob's or SaramaJob's group hands its partition to
// one consumer at a time (queue.Rules.OneDeliveryAtATime). With the producer's own
// code (Produce), which may find its earlier send and send nothing, and
// stamps each send with its clock, the copy after the producer's timeout
// is tried too (Rules.Dedup -1: late-producer-retry in the default
// matrix).
//
// A Job whose handler commits itself (CommitInHandler), and every
// LoopJob, ReaderJob and SaramaJob, whose loop holds its client and
// commits when it likes (its own commits, marks, a batch's offsets),
// settle with the group outside the schedule
// (queue.Rules.HandlerSettles): a Fetch or Ack beside another delivery's
// running handler or loop reads a committed offset it may or may not
// have moved yet, and is a race.
func (q *kafkaQueue) Rules() queue.Rules {
	plain := q.loop == nil && q.reader == nil && q.sarama == nil
	r := queue.Rules{Redeliver: q.opts.session, OneDeliveryAtATime: !plain,
		HandlerSettles: !plain || q.opts.commit == CommitInHandler}
	if q.opts.produce != nil {
		r.Dedup = -1
	}
	return r
}

// scenarioOf finds the scenario op runs in.
func (q *kafkaQueue) scenarioOf(op queue.Op) (*scenario, error) {
	db := op.Conn.Config().Database
	q.mu.Lock()
	defer q.mu.Unlock()
	s, ok := q.scenarios[db]
	if !ok {
		return nil, fmt.Errorf("twicekafka: job %q: no Kafka cluster for database %q: Enqueue of job 1 starts one", q.name, db)
	}
	return s, nil
}

// Enqueue produces the record with a kgo producer, as the producer does:
// job 1 on a fresh cluster, a copy at the next offset with the same key,
// value and headers.
func (q *kafkaQueue) Enqueue(ctx context.Context, op queue.Op) (queue.Enqueued, error) {
	if q.rec.Topic == "" {
		return queue.Enqueued{}, fmt.Errorf("twicekafka: job %q: Record.Topic is empty; name the topic the consumer reads", q.name)
	}
	if q.opts.produce != nil && (q.rec.Key != nil || q.rec.Value != nil || q.rec.Headers != nil) {
		return queue.Enqueued{}, fmt.Errorf("twicekafka: job %q: both Record's key, value or headers and Produce say what is sent; pass Record{Topic: %q} alone, and let the producer's code build the record", q.name, q.rec.Topic)
	}
	if op.Job == 1 {
		if err := q.start(ctx, op); err != nil {
			return queue.Enqueued{}, err
		}
	}
	s, err := q.scenarioOf(op)
	if err != nil {
		return queue.Enqueued{}, err
	}
	if q.opts.produce != nil {
		return q.produceByCode(ctx, op, s)
	}
	r := &kgo.Record{Topic: s.topic, Key: q.rec.Key, Value: q.rec.Value, Headers: q.rec.Headers, Timestamp: op.Now}
	if err := s.producer.ProduceSync(ctx, r).FirstErr(); err != nil {
		return queue.Enqueued{}, fmt.Errorf("twicekafka: producing job %d's record to %q: %w", op.Job, s.topic, err)
	}
	s.ownProducer.Store(r.ProducerID + 1)
	return queue.Enqueued{JobID: fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)}, nil
}

// start gives the scenario a fresh cluster, and closes the clusters of
// scenarios whose databases the harness has dropped.
func (q *kafkaQueue) start(ctx context.Context, op queue.Op) error {
	db := op.Conn.Config().Database
	s, err := q.newScenario(ctx, db)
	if err != nil {
		return fmt.Errorf("twicekafka: job %q: %w", q.name, err)
	}
	q.mu.Lock()
	if q.scenarios == nil {
		q.scenarios = map[string]*scenario{}
	}
	old := q.scenarios[db]
	q.scenarios[db] = s
	var names []string
	for name := range q.scenarios {
		if name != db {
			names = append(names, name)
		}
	}
	q.mu.Unlock()
	if old != nil {
		old.close()
	}
	if len(names) == 0 {
		return nil
	}
	rows, err := op.Conn.Query(ctx, `SELECT n FROM unnest($1::text[]) AS n WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = n)`, names)
	if err != nil {
		return fmt.Errorf("twicekafka: finding finished scenarios' clusters: %w", err)
	}
	var gone []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		gone = append(gone, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("twicekafka: finding finished scenarios' clusters: %w", err)
	}
	var done []*scenario
	q.mu.Lock()
	for _, n := range gone {
		done = append(done, q.scenarios[n])
		delete(q.scenarios, n)
	}
	q.mu.Unlock()
	for _, d := range done {
		d.close()
	}
	return nil
}

// offsetOf reads the partition and offset from a JobID Enqueue returned.
func offsetOf(jobID string) (int32, int64, error) {
	i := strings.LastIndexByte(jobID, '/')
	j := strings.LastIndexByte(jobID[:max(i, 0)], '/')
	if i < 0 || j < 0 {
		return 0, 0, fmt.Errorf("twicekafka: job ID %q is not topic/partition/offset", jobID)
	}
	p, err := strconv.ParseInt(jobID[j+1:i], 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("twicekafka: job ID %q: partition: %w", jobID, err)
	}
	o, err := strconv.ParseInt(jobID[i+1:], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("twicekafka: job ID %q: offset: %w", jobID, err)
	}
	return int32(p), o, nil
}

// Fetch hands the record out to a new consumer in the group: every
// consumer still in the group leaves it first (a dead worker's session
// ended; a live one loses the partition in the rebalance), a redrive
// resets the group's offset to the record's, and the group's committed
// offset decides: past the record, Kafka hands it out no more; otherwise
// the new consumer polls it.
func (q *kafkaQueue) Fetch(ctx context.Context, op queue.Op) (queue.Fetched, error) {
	s, err := q.scenarioOf(op)
	if err != nil {
		return queue.Fetched{}, err
	}
	partition, offset, err := offsetOf(op.JobID)
	if err != nil {
		return queue.Fetched{}, err
	}
	if q.loop != nil {
		return q.fetchLoop(ctx, op, s, partition, offset)
	}
	if q.reader != nil {
		return q.fetchReader(ctx, op, s, partition, offset)
	}
	if q.sarama != nil {
		return q.fetchSarama(ctx, op, s, partition, offset)
	}
	s.mu.Lock()
	open := s.open
	s.open = nil
	s.mu.Unlock()
	for _, c := range open {
		c.leave()
	}
	adm := kadm.NewClient(s.producer)
	if op.Kind == queue.DeliveryRedrive {
		var reset kadm.Offsets
		reset.AddOffset(s.topic, partition, offset, -1)
		resp, err := adm.CommitOffsets(ctx, s.group, reset)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return queue.Fetched{}, fmt.Errorf("twicekafka: redrive: resetting group %q's offset of %s to %d: %w", s.group, op.JobID, offset, err)
		}
	}
	at, err := committedOffset(ctx, adm, s.group, s.topic, partition)
	if err != nil {
		return queue.Fetched{}, err
	}
	if at > offset {
		return queue.Fetched{Done: true, Reason: fmt.Sprintf("group %q committed offset %d of %s[%d], past the record's %d: Kafka hands it out no more", s.group, at, s.topic, partition, offset)}, nil
	}
	c, err := q.newConsumer(s)
	if err != nil {
		return queue.Fetched{}, fmt.Errorf("twicekafka: a kgo consumer in group %q: %w", s.group, err)
	}
	r, err := pollFor(ctx, c.poll, partition, offset)
	if err != nil {
		c.close()
		return queue.Fetched{}, fmt.Errorf("twicekafka: consumer in group %q polling %s: %w", s.group, op.JobID, err)
	}
	if c.sess != nil {
		if err := c.sess.Begin(); err != nil {
			c.close()
			return queue.Fetched{}, fmt.Errorf("twicekafka: beginning the transaction of group %q's consumer: %w", s.group, err)
		}
	}
	c.Record = r
	joined(s, &s.open, &s.all, c)
	return queue.Fetched{Delivered: true, Job: c}, nil
}

var txnSeq atomic.Int64

// newConsumer is a delivery's consumer in the group, with autocommit
// disabled: a plain client, or for CommitTransactional a
// GroupTransactSession reading committed records only.
func (q *kafkaQueue) newConsumer(s *scenario) (*consumer, error) {
	opts := s.clientOpts(kgo.ConsumerGroup(s.group), kgo.ConsumeTopics(s.topic),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.AllowAutoTopicCreation())
	if q.opts.commit != CommitTransactional {
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return nil, err
		}
		return &consumer{Client: cl, pid: s.pidOf(cl), poll: func(ctx context.Context) kgo.Fetches { return cl.PollRecords(ctx, 1) }}, nil
	}
	sess, err := kgo.NewGroupTransactSession(append(opts, kgo.TransactionalID(fmt.Sprintf("%s-%d", s.group, txnSeq.Add(1))),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return nil, err
	}
	// One record a poll: the session's End commits every record polled,
	// and the delivery handles one.
	return &consumer{Client: sess.Client(), sess: sess, pid: s.pidOf(sess.Client()), poll: func(ctx context.Context) kgo.Fetches { return sess.PollRecords(ctx, 1) }}, nil
}

// pollFor polls until the record at offset comes; the records before it
// are other deliveries' (see the package doc).
func pollFor(ctx context.Context, poll func(context.Context) kgo.Fetches, partition int32, offset int64) (*kgo.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	for {
		fs := poll(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("no record at offset %d within %v: %w", offset, pollTimeout, err)
		}
		var errs []error
		fs.EachError(func(t string, p int32, err error) { errs = append(errs, fmt.Errorf("%s[%d]: %w", t, p, err)) })
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		var found *kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			if found == nil && r.Partition == partition && r.Offset == offset {
				found = r
			}
		})
		if found != nil {
			return found, nil
		}
	}
}

// handle runs one delivery's handler on the record its consumer polled.
func (q *kafkaQueue) handle(ctx context.Context, d *harness.Delivery, newHandler func(*harness.Delivery, *kgo.Client) Handler) error {
	c, ok := d.Queued.(*consumer)
	if !ok || c == nil {
		return fmt.Errorf("twicekafka: job %q, delivery %d of %s: the delivery carries no Kafka record (%T); run it through twicekafka.Job", q.name, d.Attempt, d.JobID, d.Queued)
	}
	h := newHandler(d, c.Client)
	if h == nil {
		return fmt.Errorf("twicekafka: job %q, delivery %d of %s: newHandler returned a nil Handler", q.name, d.Attempt, d.JobID)
	}
	c.mu.Lock()
	c.d, c.ctx, c.running = d, ctx, true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
	}()
	return h(ctx, c.Record)
}

func consumerOf(op queue.Op) (*consumer, error) {
	c, ok := op.Queued.(*consumer)
	if !ok || c == nil {
		return nil, fmt.Errorf("twicekafka: the delivery of %s carries no Kafka consumer (%T)", op.JobID, op.Queued)
	}
	return c, nil
}

// Ack commits the record's offset with CommitRecords on the delivery's
// consumer (CommitAfterHandler), or leaves the commit the handler made,
// and the consumer leaves the group. A commit the coordinator refuses (the
// partition moved to another consumer) leaves the record to the group's
// committed offset: a retry that the next Fetch settles.
func (q *kafkaQueue) Ack(ctx context.Context, op queue.Op) (queue.Settled, error) {
	if lc, ok := op.Queued.(*loopConsumer); ok && lc != nil {
		return q.ackLoop(ctx, op, lc)
	}
	if rc, ok := op.Queued.(*readerConsumer); ok && rc != nil {
		return q.ackReader(ctx, op, rc)
	}
	if sc, ok := op.Queued.(*saramaConsumer); ok && sc != nil {
		return q.ackSarama(ctx, op, sc)
	}
	c, err := consumerOf(op)
	if err != nil {
		return queue.Settled{}, err
	}
	defer c.close()
	switch q.opts.commit {
	case CommitInHandler:
		return q.handlerCommitted(ctx, op, c)
	case CommitTransactional:
		committed, err := c.sess.End(ctx, kgo.TryCommit)
		switch {
		case err != nil:
			return queue.Settled{Outcome: queue.Retry, After: q.opts.restart, Detail: fmt.Sprintf("transaction not committed: %v", err)}, nil
		case !committed:
			return queue.Settled{Outcome: queue.Retry, After: q.opts.restart, Detail: "transaction aborted: the consumer lost the partition in a rebalance"}, nil
		}
		return queue.Settled{Outcome: queue.Completed, Detail: fmt.Sprintf("transaction committed with offset %d", c.Record.Offset+1)}, nil
	}
	if err := c.Client.CommitRecords(ctx, c.Record); err != nil {
		return queue.Settled{Outcome: queue.Retry, Detail: fmt.Sprintf("commit refused: %v", err)}, nil
	}
	return queue.Settled{Outcome: queue.Completed, Detail: fmt.Sprintf("committed offset %d", c.Record.Offset+1)}, nil
}

// Nack takes the consumer out of the group without committing, as a poll
// loop that returns the handler's error and is restarted: the record
// comes back from the committed offset after RestartDelay.
func (q *kafkaQueue) Nack(ctx context.Context, op queue.Op, _ error) (queue.Settled, error) {
	if lc, ok := op.Queued.(*loopConsumer); ok && lc != nil {
		return q.nackLoop(lc)
	}
	if rc, ok := op.Queued.(*readerConsumer); ok && rc != nil {
		return q.nackReader(rc)
	}
	if sc, ok := op.Queued.(*saramaConsumer); ok && sc != nil {
		return q.nackSarama(sc)
	}
	c, err := consumerOf(op)
	if err != nil {
		return queue.Settled{}, err
	}
	if c.sess != nil {
		if _, err := c.sess.End(ctx, kgo.TryAbort); err != nil {
			c.close()
			return queue.Settled{Outcome: queue.Retry, After: q.opts.restart, Detail: fmt.Sprintf("aborting the transaction: %v; the consumer restarts in %v", err, q.opts.restart)}, nil
		}
	}
	c.close()
	return queue.Settled{Outcome: queue.Retry, After: q.opts.restart, Detail: fmt.Sprintf("not committed; the consumer restarts in %v", q.opts.restart)}, nil
}

// handlerCommitted reads the group's committed offset after a handler
// that commits itself returned nil: past the record, it is done;
// otherwise the handler did not commit (or the coordinator refused it),
// and the record comes back from the committed offset.
func (q *kafkaQueue) handlerCommitted(ctx context.Context, op queue.Op, c *consumer) (queue.Settled, error) {
	s, err := q.scenarioOf(op)
	if err != nil {
		return queue.Settled{}, err
	}
	at, err := committedOffset(ctx, kadm.NewClient(s.producer), s.group, c.Record.Topic, c.Record.Partition)
	if err != nil {
		return queue.Settled{}, err
	}
	if at > c.Record.Offset {
		return queue.Settled{Outcome: queue.Completed, Detail: fmt.Sprintf("the handler committed offset %d", at)}, nil
	}
	return queue.Settled{Outcome: queue.Retry, After: q.opts.restart,
		Detail: fmt.Sprintf("the handler returned nil without a commit of offset %d; the consumer restarts in %v", c.Record.Offset+1, q.opts.restart)}, nil
}

// committedOffset is the group's committed offset of the partition, -1
// when it has none (a group that never committed does not exist yet).
func committedOffset(ctx context.Context, adm *kadm.Client, group, topic string, partition int32) (int64, error) {
	committed, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = committed.Error()
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return -1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("twicekafka: reading group %q's committed offsets: %w", group, err)
	}
	if at, ok := committed.Lookup(topic, partition); ok {
		return at.At, nil
	}
	return -1, nil
}
