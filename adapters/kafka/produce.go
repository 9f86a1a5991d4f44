package twicekafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/runtwice/twice/harness"
)

// produced is one record of a Produce request, as the broker read it.
type produced struct {
	topic      string
	key, value []byte
	producerID int64 // its batch's
	// transactional is a record of a Kafka transaction, whose fate is
	// the transaction's: not an effect when produced.
	transactional bool
}

// watchProduces makes every record produced to the scenario's cluster
// while a delivery's handler or loop runs an effect of that delivery (by
// the ProducerID of the client that sent it: see producerOf), seen
// where the broker takes it: a Produce request, from whatever client,
// waits (SleepControl, so the cluster serves every other connection
// meanwhile) while each of its records is a step of the delivery, and is
// then taken as kfake takes it. A record the delivery may not make (it is
// dead, or an effect fault refuses it) closes the request's connection
// unanswered, as a broker that never got it; kgo retries it on a new one
// until the dead worker's client is gone. The harness's own copies of the
// job's record are not effects, nor are the records an Outbox records
// itself.
func (s *scenario) watchProduces(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		pr, ok := req.(*kmsg.ProduceRequest)
		if !ok {
			return nil, nil, false
		}
		recs, err := producedRecords(pr, func(id [16]byte) string {
			if ti := c.TopicIDInfo(id); ti != nil {
				return ti.Topic
			}
			return ""
		})
		if err != nil {
			// What the broker cannot read it refuses in its own way.
			return nil, nil, false
		}
		var refused error
		c.SleepControl(func() { refused = s.recordProduced(recs) })
		if refused != nil {
			return nil, refused, true
		}
		return nil, nil, false
	})
}

// recordProduced records recs as effects of the delivery whose handler
// or loop is running; nil lets the broker take them.
func (s *scenario) recordProduced(recs []produced) error {
	for _, r := range recs {
		if s.ownProducer.Load() == r.producerID+1 || r.transactional {
			// A copy of the job's record, from the harness's producer;
			// or a record in a transaction, which commits or aborts with
			// the delivery's ack (CommitTransactional).
			continue
		}
		d, ctx, outbox := s.producerOf(r.producerID)
		if d == nil || outbox {
			// No delivery runs, or its Outbox records what it sends itself.
			continue
		}
		called := false
		err := d.Effect(ctx, "kafka:"+r.topic, "", OutboxRecord{Key: string(r.key), Value: string(r.value)},
			func(context.Context) error { called = true; return nil })
		if err != nil && !called {
			return fmt.Errorf("twicekafka: a record to %q the delivery may not produce: %w", r.topic, err)
		}
		// Called and then an error: the broker took the record and the
		// answer is what was lost; kgo's idempotent producer would retry
		// it under the same sequence number, which the broker drops.
	}
	return nil
}

// runner is a delivery's consumer, as watchProduces sees it.
type runner interface {
	// runningFor is the delivery whose handler or loop runs on the
	// consumer now, and its context; nil when none does. outbox says the
	// handler is inside an Outbox send, which records itself.
	runningFor() (d *harness.Delivery, ctx context.Context, outbox bool)
	// producerID is the ProducerID of the consumer's client, the one its
	// record batches carry; -1 when it has none.
	producerID() int64
}

// producerOf is the delivery a record from producer pid is an effect
// of: the one whose client sent it, when that client is a delivery's and
// its handler or loop runs; for a client of the handler's own (pid no
// delivery's client has), the one delivery that runs now, and none while
// two run, whose records cannot be told apart.
func (s *scenario) producerOf(pid int64) (*harness.Delivery, context.Context, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pid >= 0 {
		for _, r := range s.runners {
			if r.producerID() == pid {
				return r.runningFor()
			}
		}
	}
	var d *harness.Delivery
	var ctx context.Context
	var outbox bool
	for _, r := range s.runners {
		if rd, rctx, rout := r.runningFor(); rd != nil {
			if d != nil {
				return nil, nil, false
			}
			d, ctx, outbox = rd, rctx, rout
		}
	}
	return d, ctx, outbox
}

// pidOf is the ProducerID of a delivery's client on the scenario's kfake
// cluster, whose produces watchProduces sees; -1 on the user's brokers.
func (s *scenario) pidOf(cl *kgo.Client) int64 {
	if s.cluster == nil {
		return -1
	}
	return clientPID(cl)
}

// clientPID is cl's ProducerID, -1 when it has none (idempotent writes
// disabled) or it could not be had.
func clientPID(cl *kgo.Client) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	defer cancel()
	id, _, err := cl.ProducerID(ctx)
	if err != nil || id < 0 {
		return -1
	}
	return id
}

// producerID is the loop's client's.
func (c *loopConsumer) producerID() int64 { return c.pid }

// producerID is the handler's client's.
func (c *consumer) producerID() int64 { return c.pid }

// runningFor is the loop's delivery while the loop holds its record:
// handed it and not done with it.
func (c *loopConsumer) runningFor() (*harness.Delivery, context.Context, bool) {
	select {
	case <-c.handed:
	default:
		return nil, nil, false
	}
	return c.process.runningFor()
}

// runningFor is the handler's delivery while the handler runs.
func (c *consumer) runningFor() (*harness.Delivery, context.Context, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running {
		return nil, nil, false
	}
	return c.d, c.ctx, c.outbox > 0
}

var decompressor = kgo.DefaultDecompressor()

// producedRecords decodes the records of a Produce request; topicOf
// names a topic a request (v13 on) gives by its ID.
func producedRecords(pr *kmsg.ProduceRequest, topicOf func([16]byte) string) ([]produced, error) {
	var out []produced
	for _, t := range pr.Topics {
		if t.Topic == "" {
			t.Topic = topicOf(t.TopicID)
		}
		for _, p := range t.Partitions {
			for raw := p.Records; len(raw) > 0; {
				var b kmsg.RecordBatch
				if err := b.ReadFrom(raw); err != nil {
					return nil, fmt.Errorf("a record batch to %s[%d]: %w", t.Topic, p.Partition, err)
				}
				n := 12 + int(b.Length) // FirstOffset and Length precede the rest
				if n > len(raw) || n <= 12 {
					return nil, fmt.Errorf("a record batch to %s[%d] of length %d in %d bytes", t.Topic, p.Partition, b.Length, len(raw))
				}
				raw = raw[n:]
				recs := b.Records
				if codec := kgo.CompressionCodecType(b.Attributes & 0x07); codec != kgo.CodecNone {
					var err error
					if recs, err = decompressor.Decompress(recs, codec); err != nil {
						return nil, fmt.Errorf("a record batch to %s[%d]: %w", t.Topic, p.Partition, err)
					}
				}
				for i := int32(0); i < b.NumRecords; i++ {
					l, w := kbin.Varint(recs)
					if w == 0 || l < 0 || w+int(l) > len(recs) {
						return nil, errors.New("a record runs past its batch")
					}
					var r kmsg.Record
					if err := r.ReadFrom(recs[:w+int(l)]); err != nil {
						return nil, err
					}
					recs = recs[w+int(l):]
					out = append(out, produced{topic: t.Topic, key: r.Key, value: r.Value, producerID: b.ProducerID, transactional: b.Attributes&0x10 != 0})
				}
			}
		}
	}
	return out, nil
}
