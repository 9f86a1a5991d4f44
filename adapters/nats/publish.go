package twicenats

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runtwice/twice/harness/queue"
)

// Publishing is what the producer's own publish code is given for one
// publish of the job's message (Spec.Publish): the original's, or one of
// the producer's copies.
type Publishing struct {
	// JetStream is the producer's JetStream on the scenario's server:
	// call Publish or PublishMsg on it as production does, with its own
	// options (jetstream.WithMsgID). Subjects are the production ones;
	// the scenario's stream takes them under a prefix of its own.
	// PublishAsync and PublishMsgAsync answer with an error: publish
	// synchronously. Its other methods are the real client's.
	JetStream jetstream.JetStream
	// Now is the harness clock at this publish: give it to the code where
	// production reads time.Now(), so what it stamps into the message or
	// its ID is the copy's time's.
	Now func() time.Time
	// Copy is 1 for the original publish, 2 and up for the producer's
	// copies (faults.ProducerRetry, faults.LateProducerRetry).
	Copy int
}

// producerJS is the JetStream the producer's code publishes on: the
// scenario's client, with each publish put under the scenario's prefix
// and kept with the server's answer.
type producerJS struct {
	jetstream.JetStream
	q    *natsQueue
	s    *scenario
	late bool

	mu   sync.Mutex
	sent []sent
}

// sent is one publish of the producer's code and the server's answer.
type sent struct {
	msg *nats.Msg
	ack *jetstream.PubAck
}

// Publish publishes data to subject, as PublishMsg.
func (p *producerJS) Publish(ctx context.Context, subject string, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	return p.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: data}, opts...)
}

// PublishMsg publishes msg under the scenario's prefix with the real
// client; a late copy waits for the stream to forget an earlier ID, as
// Enqueue's does.
func (p *producerJS) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if msg == nil {
		return nil, jetstream.ErrInvalidSubject
	}
	out := *msg
	out.Subject = p.s.prefix + msg.Subject
	if msg.Header != nil {
		out.Header = nats.Header{}
		for k, v := range msg.Header {
			out.Header[k] = append([]string(nil), v...)
		}
	}
	ack, err := p.q.publish(ctx, p.s, &out, p.late, opts)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.sent = append(p.sent, sent{msg: &out, ack: ack})
	p.mu.Unlock()
	return ack, nil
}

// errAsync is the answer to an asynchronous publish.
var errAsync = fmt.Errorf("twicenats: Publishing.JetStream takes synchronous publishes only (Publish, PublishMsg); the check must know the server's answer before the copy is delivered")

// PublishAsync is refused (errAsync).
func (p *producerJS) PublishAsync(string, []byte, ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	return nil, errAsync
}

// PublishMsgAsync is refused (errAsync).
func (p *producerJS) PublishMsgAsync(*nats.Msg, ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	return nil, errAsync
}

// publishByCode runs the producer's code for the publish op asks for and
// answers with the message it published to Spec.Subject.
func (q *natsQueue) publishByCode(ctx context.Context, op queue.Op, s *scenario, late bool) (queue.Enqueued, error) {
	which := fmt.Sprintf("twicenats: job %q: the producer's code (Spec.Publish), publish %d", q.name, op.Job)
	now := op.Now
	js := &producerJS{JetStream: s.js, q: q, s: s, late: late}
	if err := queue.RunProducer(ctx, q.spec.Publish, Publishing{JetStream: js, Now: func() time.Time { return now }, Copy: op.Job}); err != nil {
		return queue.Enqueued{}, fmt.Errorf("%s returned: %w", which, err)
	}
	one, dup, err := queue.FollowOne(queue.ProducerCall{Which: which, Job: op.Job, Verb: "published", Kind: q.spec.Subject,
		One: "message to %q", Many: "messages to %q", Per: "message per publish",
		Others:  func(subjects []string) string { return fmt.Sprintf("to %q", subjects) },
		Follows: "the message it publishes to Spec.Subject: call PublishMsg on Publishing.JetStream"},
		js.sent, func(p sent) string { return p.msg.Subject[len(s.prefix):] })
	if err != nil || dup.Duplicate {
		return dup, err
	}
	ack := one.ack
	if ack.Duplicate {
		return queue.Enqueued{Duplicate: true, Reason: fmt.Sprintf("the stream's duplicate window (%v) holds Nats-Msg-Id %q (stream sequence %d)", q.timing.duplicates, one.msg.Header.Get(jetstream.MsgIDHeader), ack.Sequence)}, nil
	}
	s.mu.Lock()
	s.messages[ack.Sequence] = &message{}
	s.mu.Unlock()
	return queue.Enqueued{JobID: strconv.FormatUint(ack.Sequence, 10)}, nil
}
