package twicekafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// produced is one record of a Produce request, as the broker read it.
type produced struct {
	topic      string
	key, value []byte
	producerID int64 // its batch's
}

// watchProduces makes every record produced to the scenario's cluster
// while a LoopJob delivery's loop runs an effect of that delivery, seen
// where the broker takes it: a Produce request, from whatever client,
// waits (SleepControl, so the cluster serves every other connection
// meanwhile) while each of its records is a step of the delivery, and is
// then taken as kfake takes it. A record the delivery may not make (it is
// dead, or an effect fault refuses it) closes the request's connection
// unanswered, as a broker that never got it; kgo retries it on a new one
// until the dead worker's client is gone. The harness's own copies of the
// job's record are not effects.
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

// recordProduced records recs as effects of the delivery whose loop is
// running; nil lets the broker take them.
func (s *scenario) recordProduced(recs []produced) error {
	lc := s.running()
	if lc == nil {
		return nil
	}
	lc.mu.Lock()
	d, ctx := lc.d, lc.ctx
	lc.mu.Unlock()
	for _, r := range recs {
		if s.ownProducer.Load() == r.producerID+1 {
			continue // a copy of the job's record, from the harness's producer
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

// running is the LoopJob consumer whose loop runs now: handed its record
// and not done with it. While two run (a rebalance moved the partition
// from a consumer still in its handler), it is the later one.
func (s *scenario) running() *loopConsumer {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.allLoops) - 1; i >= 0; i-- {
		c := s.allLoops[i]
		select {
		case <-c.handed:
		default:
			continue
		}
		if !c.returned.Load() && !c.killed.Load() && !c.closed.Load() {
			return c
		}
	}
	return nil
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
					out = append(out, produced{topic: t.Topic, key: r.Key, value: r.Value, producerID: b.ProducerID})
				}
			}
		}
	}
	return out, nil
}
