package twicekafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runtwice/twice/harness"
)

// Producer is what a handler produces records with: *kgo.Client and
// *kgo.GroupTransactSession have it. A handler that takes a Producer
// rather than a *kgo.Client can be handed Outbox in its check.
type Producer interface {
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
}

// Outbox is a Producer for one delivery whose records are effects: each
// record is recorded in the scenario's effect log as an effect of kind
// "kafka:" and its topic, with the record's key and value as payload
// (two records with the same topic, key and value are the same effect)
// and no idempotency key (a record's key deduplicates nothing), and then produced with next, the delivery's client, on the scenario's
// cluster. Each record is a step of the delivery, so a crash can fall
// just before it or right after the broker took it, and the default
// exactly-once policy finds a record produced twice. Under
// CommitTransactional a record is recorded when produced, before its
// transaction commits or aborts: use the session's client itself there.
func Outbox(d *harness.Delivery, next Producer) Producer { return outbox{d: d, next: next} }

type outbox struct {
	d    *harness.Delivery
	next Producer
}

// OutboxRecord is an Outbox effect's payload.
type OutboxRecord struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

func (o outbox) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	if c, ok := o.queued().(*consumer); ok && c != nil {
		// The broker sees the send too: it is this effect, not another.
		c.mu.Lock()
		c.outbox++
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			c.outbox--
			c.mu.Unlock()
		}()
	}
	out := make(kgo.ProduceResults, 0, len(rs))
	for _, r := range rs {
		var res kgo.ProduceResult
		err := o.d.Effect(ctx, "kafka:"+r.Topic, "", OutboxRecord{Key: string(r.Key), Value: string(r.Value)},
			func(ctx context.Context) error {
				res = o.next.ProduceSync(ctx, r)[0]
				return res.Err
			})
		if res.Record == nil {
			res.Record = r
		}
		res.Err = err // call's own error, or why the delivery may not make the effect
		out = append(out, res)
	}
	return out
}

// queued is the delivery's queued job, nil without a delivery.
func (o outbox) queued() any {
	if o.d == nil {
		return nil
	}
	return o.d.Queued
}
