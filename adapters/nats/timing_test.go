package twicenats

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
)

var t0 = time.Date(2026, time.January, 1, 9, 0, 0, 0, time.UTC)

// The n-th redelivery waits BackOff[n-1], its last entry from then on;
// without BackOff, AckWait.
func TestRedeliverAfter(t *testing.T) {
	b := timingOf(Spec{Consumer: jetstream.ConsumerConfig{AckWait: time.Hour, BackOff: []time.Duration{time.Second, time.Minute}}})
	assert.Equal(t, []time.Duration{time.Second, time.Minute, time.Minute}, []time.Duration{b.redeliverAfter(1), b.redeliverAfter(2), b.redeliverAfter(3)})
	a := timingOf(Spec{Consumer: jetstream.ConsumerConfig{AckWait: time.Hour}})
	assert.Equal(t, time.Hour, a.redeliverAfter(3))
	assert.Equal(t, DefaultAckWait, timingOf(Spec{}).redeliverAfter(1))
}

// InProgress restarts the wait from its own time; a Nak's release time
// replaces it.
func TestDueAt(t *testing.T) {
	q := &natsQueue{timing: timingOf(Spec{Consumer: jetstream.ConsumerConfig{AckWait: time.Minute}})}
	d := &delivery{n: 1, from: t0}
	m := &message{last: d}
	assert.Equal(t, t0.Add(time.Minute), q.dueAt(m, d))
	d.progress = append(d.progress, t0.Add(50*time.Second))
	assert.Equal(t, t0.Add(110*time.Second), q.dueAt(m, d), "InProgress at +50s")
	q.record(m, d, answer{kind: ackNakDelay, delay: 5 * time.Minute}, t0.Add(time.Minute))
	assert.Equal(t, t0.Add(6*time.Minute), q.dueAt(m, d))
}

// NakWithDelay under BackOff: the server dates the message back by
// AckWait (BackOff[0]) plus the delay, and then waits for the next
// delivery's BackOff entry (consumer.go, processNak, checkPending).
func TestNakDelayUnderBackOff(t *testing.T) {
	q := &natsQueue{timing: timingOf(Spec{Consumer: jetstream.ConsumerConfig{BackOff: []time.Duration{time.Second, 10 * time.Second}}})}
	assert.Equal(t, time.Minute, q.nakDelay(&delivery{n: 1}, time.Minute), "first delivery: BackOff[0] - BackOff[0]")
	assert.Equal(t, time.Minute+9*time.Second, q.nakDelay(&delivery{n: 2}, time.Minute))
	plain := &natsQueue{timing: timingOf(Spec{})}
	assert.Equal(t, time.Minute, plain.nakDelay(&delivery{n: 3}, time.Minute))
}
