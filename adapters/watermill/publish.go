package twicewatermill

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/runtwice/twice/harness/queue"
)

// Publishing is what the producer's own publish code is given for one
// publish of the job's message (Publish): the original's, or one of the
// producer's copies.
type Publishing struct {
	// Publisher is where the code publishes, as production publishes on
	// its own message.Publisher: the message it publishes is the copy
	// the check delivers. Close does nothing.
	Publisher message.Publisher
	// Now is the harness clock at this publish: give it to the code where
	// production reads time.Now(), so what it stamps into the message (a
	// requested_at) is the copy's time's.
	Now func() time.Time
	// Copy is 1 for the original publish, 2 and up for the producer's
	// copies (faults.ProducerRetry, faults.LateProducerRetry).
	Copy int
}

// Publish runs the producer's own publish code for every publish of the
// job's message, the original's and each producer copy's at the copy's
// time on the harness clock, instead of publishing the Job's payload and
// metadata: the UUID it gives (watermill.NewUUID() per call, or one from
// its own data) and what it stamps are the copy's. Pass production's
// function unchanged, wired to p:
//
//	twicewatermill.Publish(func(ctx context.Context, p twicewatermill.Publishing) error {
//		return orders.Service{Pub: p.Publisher, Now: p.Now}.Place(ctx, 9812)
//	})
//
// The code must publish one message in one call, to any topic (the job
// is the handler's); one that publishes none on a retry was refused by
// the producer itself, and the copy is not delivered. It is Producer
// with the message taken from the producer's own Publish call; with SQL,
// the message must carry MessageUUID(name, n), as there.
func Publish(publish func(ctx context.Context, p Publishing) error) Option {
	return func(o *options) {
		o.producer = func(n int, now time.Time) (*message.Message, error) {
			rec := &recorder{}
			if err := queue.RunProducer(context.Background(), publish, Publishing{Publisher: rec, Now: func() time.Time { return now }, Copy: n}); err != nil {
				return nil, fmt.Errorf("the producer's publish code (twicewatermill.Publish) returned: %w", err)
			}
			switch len(rec.msgs) {
			case 0:
				if n == 1 {
					return nil, errors.New("the producer's publish code (twicewatermill.Publish) published no message; the check follows the message it publishes: call Publish on Publishing.Publisher")
				}
				return nil, errNotPublished
			case 1:
				return rec.msgs[0], nil
			}
			return nil, fmt.Errorf("the producer's publish code (twicewatermill.Publish) published %d messages (to %q) in one call; the check follows one message per publish of the producer", len(rec.msgs), rec.topics)
		}
	}
}

// errNotPublished is a producer copy whose code published nothing: the
// producer refused its own retry.
var errNotPublished = errors.New("the producer's publish code published no message on its retry")

// recorder is the Publisher the producer's code is given: it keeps what
// is published, for the queue to publish as the copy.
type recorder struct {
	mu     sync.Mutex
	msgs   []*message.Message
	topics []string
}

// Publish keeps msgs.
func (r *recorder) Publish(topic string, msgs ...*message.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		r.msgs = append(r.msgs, m)
		r.topics = append(r.topics, topic)
	}
	return nil
}

// Close does nothing: the producer's publisher outlives its calls.
func (r *recorder) Close() error { return nil }
