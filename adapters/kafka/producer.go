package twicekafka

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runtwice/twice/harness/queue"
)

// Producing is what the producer's own code is given for one send of the
// job's record (Produce): the original's, or one of the producer's
// copies.
type Producing struct {
	// Client is a kgo producer on the scenario's cluster: call
	// ProduceSync (or Produce) on it as production calls it on its
	// client, with the record it builds.
	Client *kgo.Client
	// Now is the harness clock at this send: give it to the producer
	// where production reads time.Now(), so what it stamps into the
	// record (a requested_at, a header) is the copy's time's.
	Now func() time.Time
	// Copy is 1 for the original send, 2 and up for the producer's
	// copies (faults.ProducerRetry, faults.LateProducerRetry).
	Copy int
}

// Produce runs the producer's own code for every send of the job's
// record, instead of producing Record's key, value and headers: the
// original's, and each producer copy's at the copy's time on the harness
// clock (the late-producer-retry copy comes harness.Config.ProducerTimeout,
// 5s, after the original). Pass production's function unchanged, wired
// to p:
//
//	twicekafka.Produce(func(ctx context.Context, p twicekafka.Producing) error {
//		return payments.Publish(ctx, p.Client, p.Now(), payment)
//	})
//
// The code must produce one record to Record.Topic, the topic the
// consumer reads, in one call; records it produces to other topics are
// the producer's own business and are not delivered. A copy whose code
// produces no record to the topic was refused by the producer itself (it
// found its earlier send) and is not delivered. Record then names only
// the topic.
func Produce(produce func(ctx context.Context, p Producing) error) Option {
	return func(o *options) { o.produce = produce }
}

// producerSeen is the scenario producer's hook: it keeps the records the
// producer's code sent during one Enqueue.
type producerSeen struct {
	mu   sync.Mutex
	on   bool
	recs []*kgo.Record
}

// OnProduceRecordUnbuffered keeps a record the broker took while the
// producer's code runs.
func (p *producerSeen) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.on && err == nil {
		p.recs = append(p.recs, r)
	}
}

// watch starts keeping what is produced; the func it returns stops and
// gives it.
func (p *producerSeen) watch() func() []*kgo.Record {
	p.mu.Lock()
	p.on, p.recs = true, nil
	p.mu.Unlock()
	return func() []*kgo.Record {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.on = false
		return p.recs
	}
}

// produceByCode runs the producer's code for the send op asks for and
// answers with the record it produced to the consumer's topic.
func (q *kafkaQueue) produceByCode(ctx context.Context, op queue.Op, s *scenario) (queue.Enqueued, error) {
	which := fmt.Sprintf("twicekafka: job %q: the producer's code (twicekafka.Produce), send %d", q.name, op.Job)
	now := op.Now
	stop := s.seen.watch()
	err := queue.RunProducer(ctx, q.opts.produce, Producing{Client: s.producer, Now: func() time.Time { return now }, Copy: op.Job})
	if err == nil {
		// What the code produced without waiting for it has been sent
		// when its Produce calls' promises have run.
		err = s.producer.Flush(ctx)
	}
	recs := stop()
	if err != nil {
		return queue.Enqueued{}, fmt.Errorf("%s returned: %w", which, err)
	}
	r, dup, err := queue.FollowOne(queue.ProducerCall{Which: which, Job: op.Job, Verb: "produced", Kind: s.topic,
		One: "record to %q", Many: "records to %q", Per: "record per send",
		Others:  func(topics []string) string { return fmt.Sprintf("to %q", topics) },
		Follows: "the record it sends to the consumer's topic (Record.Topic): call ProduceSync on Producing.Client"},
		recs, func(r *kgo.Record) string { return r.Topic })
	if err != nil || dup.Duplicate {
		return dup, err
	}
	s.ownProducer.Store(r.ProducerID + 1)
	return queue.Enqueued{JobID: fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)}, nil
}
