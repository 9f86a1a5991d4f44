package twicekafka

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
)

// process is what the worker processes of LoopJob, ReaderJob and
// SaramaJob share: one delivery's consumer, whose consume loop runs on
// the process's main goroutine, and the steps of its life the harness
// drives (handed the loop, done with the record, acked, killed, closed).
// Each face embeds it and adds its client.
type process struct {
	topic     string
	partition int32
	offset    int64
	started   time.Time // the harness clock at its Fetch

	// start hands the loop to the goroutine that runs it (serve): the
	// process's main goroutine, started with the consumer, not one the
	// delivery's handler started, which the harness would wait for.
	start   chan func() error
	closing chan struct{} // closed when the consumer ends
	done    chan struct{} // closed when the loop returned (or never ran)
	err     error         // the loop's, once done is closed

	// mu guards stopLoop, d and ctx, and what a face keeps beside them.
	mu       sync.Mutex
	stopLoop context.CancelFunc // the loop's context, once it runs
	// d and ctx are the delivery the loop runs for and its context: a
	// record produced while it runs is d's effect (watchProduces).
	d   *harness.Delivery
	ctx context.Context

	returned, acked, killed, closed atomic.Bool
}

// newProcess is the process of a consumer of the record at offset of
// topic[partition].
func newProcess(topic string, partition int32, offset int64) process {
	return process{topic: topic, partition: partition, offset: offset,
		start: make(chan func() error, 1), closing: make(chan struct{}), done: make(chan struct{})}
}

// serve runs the loop it is handed, once; a consumer that is never
// handed one ends with closing.
func (p *process) serve() {
	defer close(p.done)
	select {
	case run := <-p.start:
		p.err = run()
	case <-p.closing:
	}
}

// stopRun cancels the loop's context, if it runs.
func (p *process) stopRun() {
	p.mu.Lock()
	stop := p.stopLoop
	p.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// shut stops the loop and closes closing, once: false when it was shut
// already.
func (p *process) shut() bool {
	if p.closed.Swap(true) {
		return false
	}
	p.stopRun()
	close(p.closing)
	return true
}

// run hands serve the loop for delivery d, on a context of its own that
// outlives the handler's ctx; false when the consumer was closed before.
// A panic in the loop is its error, as a process that dies of it.
func (p *process) run(ctx context.Context, d *harness.Delivery, loop func(ctx context.Context) error) bool {
	loopCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	p.mu.Lock()
	p.stopLoop, p.d, p.ctx = stop, d, ctx
	p.mu.Unlock()
	if p.closed.Load() {
		stop()
		return false
	}
	p.start <- func() (err error) {
		defer recoverAs(&err, "loop")
		return loop(loopCtx)
	}
	return true
}

// holding reports whether the consumer still holds the partition at now:
// Kafka gives a partition to one consumer of the group at a time, and one
// still handling its record keeps it until its session ends (on the
// harness clock, SessionTimeout after it took it).
func (p *process) holding(now time.Time, session time.Duration) bool {
	return !p.returned.Load() && !p.killed.Load() && !p.closed.Load() && now.Sub(p.started) < session
}

// runningFor is the delivery the loop runs for until it is done with its
// record.
func (p *process) runningFor() (*harness.Delivery, context.Context, bool) {
	if p.returned.Load() || p.killed.Load() || p.closed.Load() {
		return nil, nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.d, p.ctx, false
}

// recoverAs makes a panic in the consumer's code (its loop, or the
// handler's method) its error, as a process that dies of it.
func recoverAs(err *error, what string) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("the consumer's %s panicked: %v\n%s", what, p, debug.Stack())
	}
}

// redrive resets the group's offset to the record's for a redrive, as a
// person does; any other delivery leaves it.
func redrive(ctx context.Context, adm *kadm.Client, op queue.Op, s *scenario, partition int32, offset int64) error {
	if op.Kind != queue.DeliveryRedrive {
		return nil
	}
	if err := resetOffset(ctx, adm, s, partition, offset); err != nil {
		return fmt.Errorf("twicekafka: redrive: resetting group %q's offset of %s to %d: %w", s.group, op.JobID, offset, err)
	}
	return nil
}

// passed is the Fetch of a record the group's committed offset at is
// past: Kafka hands it out no more.
func passed(s *scenario, at int64, partition int32, offset int64) queue.Fetched {
	return queue.Fetched{Done: true, Reason: fmt.Sprintf("group %q committed offset %d of %s[%d], past the record's %d: Kafka hands it out no more", s.group, at, s.topic, partition, offset)}
}

// readBack settles an ack by the group's committed offset, read back
// after the face's own commit: past the record, the job is done, and how
// says who committed; otherwise the consumer restarts, and why says why
// (it follows "was not committed").
func (q *kafkaQueue) readBack(ctx context.Context, op queue.Op, p *process, how, why string) (queue.Settled, error) {
	s, err := q.scenarioOf(op)
	if err != nil {
		return queue.Settled{}, err
	}
	at, err := committedOffset(ctx, kadm.NewClient(s.producer), s.group, p.topic, p.partition)
	if err != nil {
		return queue.Settled{}, err
	}
	if at > p.offset {
		return queue.Settled{Outcome: queue.Completed, Detail: fmt.Sprintf("%s offset %d", how, at)}, nil
	}
	return queue.Settled{Outcome: queue.Retry, After: q.opts.restart,
		Detail: fmt.Sprintf("offset %d was not committed%s; the consumer restarts in %v", p.offset+1, why, q.opts.restart)}, nil
}

// restarts is the nack of a consumer whose code returned an error (what
// returned it): the process exits and restarts after RestartDelay, and
// the next Fetch reads what the group committed.
func (q *kafkaQueue) restarts(what string) queue.Settled {
	return queue.Settled{Outcome: queue.Retry, After: q.opts.restart, Detail: fmt.Sprintf("%s returned an error; the consumer restarts in %v", what, q.opts.restart)}
}

// takeOver takes the group's open consumers of a face (*open) out of it
// for a new one, and returns them; unless one of them still holds the
// partition at now (holding), when it leaves them and returns false.
func takeOver[C interface {
	holding(time.Time, time.Duration) bool
}](s *scenario, open *[]C, now time.Time, session time.Duration) ([]C, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	taken := *open
	for _, c := range taken {
		if c.holding(now, session) {
			return nil, false
		}
	}
	*open = nil
	return taken, true
}

// stillHeld is the Fetch of a record whose partition who (a consumer of
// the group) still holds, and why it does.
func (q *kafkaQueue) stillHeld(s *scenario, partition int32, who, why string) queue.Fetched {
	return queue.Fetched{Reason: fmt.Sprintf("%s of group %q still holds %s[%d] (%s; the group moves the partition %v after it took it)", who, s.group, s.topic, partition, why, q.opts.session)}
}

// joined records a face's new consumer as open (in *open), made (in
// *all, closed with the scenario) and a runner (watchProduces).
func joined[C runner](s *scenario, open, all *[]C, c C) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*open = append(*open, c)
	*all = append(*all, c)
	s.runners = append(s.runners, c)
}

// diedBeforeCommit reports whether a worker done with its record but
// never acked died before its commit: it did, unless the ack was lost.
func (p *process) diedBeforeCommit(op queue.Op) bool {
	return p.returned.Load() && !p.acked.Load() && op.Kind != queue.DeliveryLostAckRedelivery
}
