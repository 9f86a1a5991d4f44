package twicenats

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nats-io/nats.go/jetstream"
)

// ackKind is what a handler answered for a message, as jetstream.Msg's
// methods send it.
type ackKind int

const (
	noAck ackKind = iota
	ackAck
	ackDouble
	ackNak
	ackNakDelay
	ackTerm
)

func (k ackKind) String() string {
	switch k {
	case ackAck:
		return "Ack"
	case ackDouble:
		return "DoubleAck"
	case ackNak:
		return "Nak"
	case ackNakDelay:
		return "NakWithDelay"
	case ackTerm:
		return "Term"
	}
	return "no ack"
}

// answer is a handler's final answer for its message.
type answer struct {
	kind   ackKind
	delay  time.Duration // NakWithDelay's
	reason string        // TermWithReason's
	alive  bool          // the delivery was alive when the handler sent it
	// queries is how many statements the handler had started on d.DB
	// when it answered: one started after means the answer was on the
	// wire before it.
	queries int64
}

// delivery is one hand-out of a message: the real jetstream.Msg the
// server delivered, and what the handler answered through deliveryMsg.
type delivery struct {
	msg  jetstream.Msg
	seq  uint64 // stream sequence: the job ID
	n    int    // the server's NumDelivered
	from time.Time

	ctx      context.Context // the handler's, once it runs
	returned chan struct{}   // closed when the handler returned

	mu       sync.Mutex
	ans      answer
	progress []time.Time // InProgress calls, on the harness clock
	sent     bool        // the answer went to the server
	recorded bool        // the queue took the answer into the message's fate
}

// deliveryMsg is the jetstream.Msg the handler gets: the server's message
// as the real client received it, whose acks are sent to the server by the
// queue (see the package doc, "Acks").
type deliveryMsg struct {
	jetstream.Msg
	d       *delivery
	ctx     context.Context
	now     func() time.Time
	queries *queryCounter
}

var _ jetstream.Msg = (*deliveryMsg)(nil)

// settle records the handler's final answer; the second one is refused as
// the real client refuses it.
func (m *deliveryMsg) settle(a answer) error {
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	if m.d.ans.kind != noAck {
		return jetstream.ErrMsgAlreadyAckd
	}
	a.alive = m.ctx.Err() == nil
	a.queries = m.queries.n.Load()
	m.d.ans = a
	return nil
}

// Ack is jetstream.Msg's Ack.
func (m *deliveryMsg) Ack() error { return m.settle(answer{kind: ackAck}) }

// DoubleAck is jetstream.Msg's DoubleAck.
func (m *deliveryMsg) DoubleAck(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return m.settle(answer{kind: ackDouble})
}

// Nak is jetstream.Msg's Nak.
func (m *deliveryMsg) Nak() error { return m.settle(answer{kind: ackNak}) }

// NakWithDelay is jetstream.Msg's NakWithDelay.
func (m *deliveryMsg) NakWithDelay(delay time.Duration) error {
	return m.settle(answer{kind: ackNakDelay, delay: delay})
}

// Term is jetstream.Msg's Term.
func (m *deliveryMsg) Term() error { return m.settle(answer{kind: ackTerm}) }

// TermWithReason is jetstream.Msg's TermWithReason.
func (m *deliveryMsg) TermWithReason(reason string) error {
	return m.settle(answer{kind: ackTerm, reason: reason})
}

// InProgress is jetstream.Msg's InProgress: the server restarts the
// message's AckWait, here on the harness clock. It is sent to the server
// at once, as the real client sends it.
func (m *deliveryMsg) InProgress() error {
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	if m.d.ans.kind != noAck {
		return jetstream.ErrMsgAlreadyAckd
	}
	if m.ctx.Err() != nil {
		return nil // a dead worker's progress never reaches the server
	}
	m.d.progress = append(m.d.progress, m.now())
	if err := m.Msg.InProgress(); err != nil {
		return fmt.Errorf("twicenats: InProgress of stream sequence %d: %w", m.d.seq, err)
	}
	return nil
}

// queryCounter counts the statements a handler starts on its pool (a
// pgx tracer), so the queue knows whether it went on after answering.
type queryCounter struct{ n atomic.Int64 }

// TraceQueryStart counts one statement.
func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

// TraceQueryEnd does nothing.
func (c *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
