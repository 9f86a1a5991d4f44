package twiceasynq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/runtwice/twice/harness/queue"
)

// Enqueue is asynq's client Enqueue of the task (or, for copy n with
// Copies, of the task built for it). Job 1 starts the scenario on a fresh
// Redis database. A Unique lock whose TTL has passed on the harness clock
// is gone first.
func (q *asynqQueue) Enqueue(ctx context.Context, op queue.Op) (queue.Enqueued, error) {
	if q.err != nil {
		return queue.Enqueued{}, q.err
	}
	var s *scenario
	var err error
	if op.Job == 1 {
		s, err = q.newScenario(ctx, op.Conn)
	} else {
		s, err = scenarioOf(op.Conn)
	}
	if err != nil {
		return queue.Enqueued{}, err
	}
	if q.opts.produce != nil {
		return q.produce(ctx, op, s)
	}
	task, m := q.task, q.msg
	if op.Job > 1 && q.opts.copyTask != nil {
		task = q.opts.copyTask(op.Job, op.Now)
		if m, err = compose(q.name, task, q.opts.enqueue); err != nil {
			return queue.Enqueued{}, fmt.Errorf("the task Copies built for copy %d: %w", op.Job, err)
		}
	}
	opts := slices.Clone(q.opts.enqueue)
	if m.taskID == "" {
		opts = append(opts, asynq.TaskID(q.taskID(op.Job)))
	}
	if err := s.expireUnique(ctx, op.Now); err != nil {
		return queue.Enqueued{}, err
	}
	if err := s.expireRetained(ctx, op.Now); err != nil {
		return queue.Enqueued{}, err
	}
	wall := time.Now()
	info, err := s.client.EnqueueContext(ctx, task, opts...)
	switch {
	case errors.Is(err, asynq.ErrDuplicateTask):
		return queue.Enqueued{JobID: q.taskID(op.Job), Duplicate: true,
			Reason: fmt.Sprintf("asynq's client: %v (Unique(%v): the lock %s is held)", err, m.uniqueTTL, uniqueKey(m.queue, task.Type(), task.Payload()))}, nil
	case errors.Is(err, asynq.ErrTaskIDConflict):
		return queue.Enqueued{JobID: m.taskID, Duplicate: true, Reason: fmt.Sprintf("asynq's client: %v (TaskID(%q))", err, m.taskID)}, nil
	case err != nil:
		return queue.Enqueued{}, fmt.Errorf("asynq's client: %w", err)
	}
	return s.enqueued(ctx, op, info, task, m, wall)
}

// enqueued keeps what asynq does not of a task asynq's client took at
// wall on the wall clock: when it is due and when its Unique lock ends on
// the harness clock, and its retention.
func (s *scenario) enqueued(ctx context.Context, op queue.Op, info *asynq.TaskInfo, task *asynq.Task, m message, wall time.Time) (queue.Enqueued, error) {
	var delay time.Duration
	if info.State == asynq.TaskStateScheduled {
		delay = m.processIn
		if !m.processAt.IsZero() {
			delay = m.processAt.Sub(wall).Round(time.Second)
		}
	}
	ts := &taskState{queue: info.Queue, retention: m.retention}
	if delay > 0 {
		ts.dueAt = op.Now.Add(delay)
	}
	if m.uniqueTTL > 0 {
		// asynq gives the lock a TTL on the wall clock; the check ends it
		// on the harness clock instead.
		key := uniqueKey(m.queue, task.Type(), task.Payload())
		if err := s.rdb.Persist(ctx, key).Err(); err != nil {
			return queue.Enqueued{}, fmt.Errorf("keeping the Unique lock %s to the harness clock: %w", key, err)
		}
		s.mu.Lock()
		s.uniqueAt[key] = op.Now.Add(delay + m.uniqueTTL)
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.tasks[info.ID] = ts
	s.mu.Unlock()
	return queue.Enqueued{JobID: info.ID}, nil
}

// expireUnique deletes the Unique locks whose TTL ended by now on the
// harness clock, as Redis would have expired them.
func (s *scenario) expireUnique(ctx context.Context, now time.Time) error {
	s.mu.Lock()
	var keys []string
	for k, until := range s.uniqueAt {
		if !until.After(now) {
			keys = append(keys, k)
			delete(s.uniqueAt, k)
		}
	}
	s.mu.Unlock()
	for _, k := range keys {
		if err := s.rdb.Del(ctx, k).Err(); err != nil {
			return fmt.Errorf("expiring the Unique lock %s: %w", k, err)
		}
	}
	return nil
}

// expireRetained deletes the completed tasks whose Retention ended by now
// on the harness clock, as asynq's janitor does on the wall clock
// (rdb.DeleteExpiredCompletedTasks: the task's hash and its place in the
// queue's completed set), so a TaskID is free again for a later copy.
func (s *scenario) expireRetained(ctx context.Context, now time.Time) error {
	s.mu.Lock()
	type gone struct{ queue, id string }
	var ids []gone
	for id, ts := range s.tasks {
		if !ts.retainedUntil.IsZero() && !ts.retainedUntil.After(now) {
			ids = append(ids, gone{ts.queue, id})
			ts.retainedUntil = time.Time{}
		}
	}
	s.mu.Unlock()
	for _, g := range ids {
		prefix := "asynq:{" + g.queue + "}:"
		if err := s.rdb.Del(ctx, prefix+"t:"+g.id).Err(); err != nil {
			return fmt.Errorf("expiring the retained task %s: %w", g.id, err)
		}
		if err := s.rdb.ZRem(ctx, prefix+"completed", g.id).Err(); err != nil {
			return fmt.Errorf("expiring the retained task %s: %w", g.id, err)
		}
	}
	return nil
}

func (s *scenario) taskOf(id string) (*taskState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.tasks[id]
	if ts == nil {
		return nil, fmt.Errorf("twiceasynq: task %s was not enqueued in this scenario", id)
	}
	return ts, nil
}

// Fetch hands the task out as asynq would at op.Now on the harness clock:
// a task whose worker died is taken back by asynq's recoverer once its
// lease expired, a redrive is the Inspector's RunTask, a scheduled or
// retrying task that is due is run (the forwarder's move), and a pending
// task is dequeued by a worker's processor under a new lease.
func (q *asynqQueue) Fetch(ctx context.Context, op queue.Op) (queue.Fetched, error) {
	s, err := scenarioOf(op.Conn)
	if err != nil {
		return queue.Fetched{}, err
	}
	s.watch(ctx)
	ts, err := s.taskOf(op.JobID)
	if err != nil {
		return queue.Fetched{}, err
	}
	if err := s.expireUnique(ctx, op.Now); err != nil {
		return queue.Fetched{}, err
	}
	for range 4 {
		info, err := s.state(ctx, ts.queue, op.JobID)
		if err != nil {
			return queue.Fetched{}, err
		}
		if info == nil {
			return queue.Fetched{Done: true, Reason: fmt.Sprintf("asynq deleted task %s when it succeeded", op.JobID)}, nil
		}
		redrive := op.Kind == queue.DeliveryRedrive
		switch info.State {
		case asynq.TaskStateCompleted:
			return queue.Fetched{Done: true, Reason: fmt.Sprintf("asynq task %s is completed", op.JobID)}, nil
		case asynq.TaskStateArchived:
			if !redrive {
				return queue.Fetched{Reason: fmt.Sprintf("asynq task %s is archived after %d retries: %s", op.JobID, info.Retried, info.LastErr)}, nil
			}
			if err := s.run(ts, op.JobID); err != nil {
				return queue.Fetched{}, err
			}
			continue
		case asynq.TaskStateScheduled, asynq.TaskStateRetry:
			if !redrive && ts.dueAt.After(op.Now) {
				return queue.Fetched{DueAt: ts.dueAt, Reason: fmt.Sprintf("asynq task %s is in %s until %s (retry count %d)", op.JobID, info.State, ts.dueAt.Sub(op.Now), info.Retried)}, nil
			}
			if err := s.run(ts, op.JobID); err != nil {
				return queue.Fetched{}, err
			}
			continue
		case asynq.TaskStateActive:
			s.mu.Lock()
			h := ts.holder
			s.mu.Unlock()
			if h == nil {
				break // dequeued and not yet handed out
			}
			if recoverAt := h.started.Add(LeaseDuration + RecovererCutoff); op.Now.Before(recoverAt) {
				return queue.Fetched{Reason: fmt.Sprintf("asynq task %s is active (retry count %d) and its lease holds; the recoverer takes it back in %s if its worker died",
					op.JobID, info.Retried, recoverAt.Sub(op.Now))}, nil
			}
			if err := s.recoverTask(ctx, h, ts); err != nil {
				return queue.Fetched{}, err
			}
			continue
		}
		d, err := s.awaitTaken(ctx, op.JobID)
		if err != nil {
			return queue.Fetched{}, err
		}
		if d.info, err = s.state(ctx, ts.queue, op.JobID); err != nil {
			return queue.Fetched{}, fmt.Errorf("twiceasynq: reading task %s after asynq's processor dequeued it: %w", op.JobID, err)
		}
		if d.info == nil {
			return queue.Fetched{}, fmt.Errorf("twiceasynq: task %s is gone from Redis right after asynq's processor dequeued it", op.JobID)
		}
		d.started = op.Now
		s.mu.Lock()
		ts.holder = d
		s.mu.Unlock()
		regMu.Lock()
		deliveries[d.info] = d
		regMu.Unlock()
		return queue.Fetched{Delivered: true, Attempt: d.info.Retried + 1, Job: d.info}, nil
	}
	return queue.Fetched{}, fmt.Errorf("twiceasynq: task %s did not settle into a state Fetch can hand out", op.JobID)
}

// run is the Inspector's RunTask: the task is pending at once.
func (s *scenario) run(ts *taskState, id string) error {
	if err := s.insp.RunTask(ts.queue, id); err != nil {
		return fmt.Errorf("asynq's Inspector.RunTask(%q, %q): %w", ts.queue, id, err)
	}
	return nil
}

// recoverTask is asynq's recoverer taking back the task of delivery h,
// whose worker died or lost its heartbeats: the worker is cut off Redis,
// the task's lease is rewound past the recoverer's cutoff, and a fresh
// server's recoverer (it runs at start) moves the task to retry (or
// archives it when its retries are spent).
func (s *scenario) recoverTask(ctx context.Context, h *delivery, ts *taskState) error {
	h.w.cut.Store(true)
	s.retire(h.w)
	key := "asynq:{" + ts.queue + "}:lease"
	past := float64(time.Now().Add(-2 * (LeaseDuration + RecovererCutoff)).Unix())
	if err := s.rdb.ZAddXX(ctx, key, redis.Z{Score: past, Member: h.id}).Err(); err != nil {
		return fmt.Errorf("rewinding the lease of task %s in %s: %w", h.id, key, err)
	}
	if _, err := s.startWorker(); err != nil {
		return err
	}
	info, err := s.awaitWritten(ctx, ts.queue, h.id)
	if err != nil {
		return fmt.Errorf("twiceasynq: asynq's recoverer did not take back task %s: %w", h.id, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ts.holder = nil
	if info != nil && info.State == asynq.TaskStateRetry {
		at := h.started.Add(LeaseDuration + RecovererCutoff)
		ts.dueAt = at.Add(s.q.opts.retryDelay(h.info.Retried, asynq.ErrLeaseExpired, h.task))
	}
	return nil
}

// Ack is asynq's processor after ProcessTask returned nil.
func (q *asynqQueue) Ack(ctx context.Context, op queue.Op) (queue.Settled, error) {
	return q.settle(ctx, op, nil)
}

// Nack is asynq's processor after ProcessTask returned err: RevokeTask
// deletes the task, SkipRetry or spent retries archive it, any other
// error retries it after the retry delay.
func (q *asynqQueue) Nack(ctx context.Context, op queue.Op, err error) (queue.Settled, error) {
	return q.settle(ctx, op, err)
}

// settle hands the handler's result to asynq's processor and reads what it
// recorded. A handler whose context the harness cancelled ended for asynq
// at that moment: at the task's timeout (context.DeadlineExceeded), or
// when its lease expired, when the processor records nothing.
func (q *asynqQueue) settle(ctx context.Context, op queue.Op, herr error) (queue.Settled, error) {
	info, ok := op.Queued.(*asynq.TaskInfo)
	if !ok || info == nil {
		return queue.Settled{}, fmt.Errorf("the delivery of task %s carries no asynq task record (%T)", op.JobID, op.Queued)
	}
	d := deliveryOf(info)
	s, err := scenarioOf(op.Conn)
	if err != nil {
		return queue.Settled{}, err
	}
	if d == nil {
		return queue.Settled{}, fmt.Errorf("task %s was not handed out by this queue", op.JobID)
	}
	ts, err := s.taskOf(info.ID)
	if err != nil {
		return queue.Settled{}, err
	}
	d.mu.Lock()
	cancelled, was := d.cancelled, d.settled
	d.settled = true
	d.mu.Unlock()
	if was {
		return queue.Settled{}, fmt.Errorf("the delivery of task %s was settled twice", op.JobID)
	}
	if d.w.cut.Load() {
		return s.current(ctx, ts, info.ID, op.Now, "its worker was cut off Redis; nothing recorded")
	}
	if cancelled {
		if q.cancelAfter() >= LeaseDuration {
			// The worker lost its heartbeats: the lease expired under
			// the handler, and the processor writes nothing.
			d.w.cut.Store(true)
			s.retire(d.w)
			after := max(d.started.Add(LeaseDuration+RecovererCutoff).Sub(op.Now), 0)
			return queue.Settled{Outcome: queue.Retry, After: after, Detail: "lease expired; nothing recorded, the recoverer takes the task back"}, nil
		}
		herr = context.DeadlineExceeded
	}
	d.result <- herr
	got, err := s.awaitWritten(ctx, ts.queue, info.ID)
	if err != nil {
		return queue.Settled{}, err
	}
	s.mu.Lock()
	if ts.holder == d {
		ts.holder = nil
	}
	s.mu.Unlock()
	s.retire(d.w)
	switch {
	case got == nil && errors.Is(herr, asynq.RevokeTask):
		return queue.Settled{Outcome: queue.Cancelled, Detail: "asynq.RevokeTask"}, nil
	case got == nil || got.State == asynq.TaskStateCompleted:
		if got != nil && ts.retention > 0 {
			s.mu.Lock()
			ts.retainedUntil = op.Now.Add(ts.retention)
			s.mu.Unlock()
		}
		return queue.Settled{Outcome: queue.Completed}, nil
	case got.State == asynq.TaskStateArchived:
		why := fmt.Sprintf("archived after %d of %d retries", got.Retried, got.MaxRetry)
		if errors.Is(herr, asynq.SkipRetry) {
			why = "archived: asynq.SkipRetry"
		}
		return queue.Settled{Outcome: queue.Discarded, Detail: why}, nil
	case got.State == asynq.TaskStateRetry:
		delay := q.opts.retryDelay(info.Retried, herr, d.task)
		s.mu.Lock()
		ts.dueAt = op.Now.Add(delay)
		s.mu.Unlock()
		return queue.Settled{Outcome: queue.Retry, After: delay, Detail: fmt.Sprintf("in %v (retry count %d of %d)", delay, got.Retried, got.MaxRetry)}, nil
	}
	return queue.Settled{Outcome: queue.Retry, Detail: fmt.Sprintf("asynq left the task %s", got.State)}, nil
}

// current says how the task stands when a delivery's worker was gone at
// its end: the processor recorded nothing.
func (s *scenario) current(ctx context.Context, ts *taskState, id string, now time.Time, why string) (queue.Settled, error) {
	info, err := s.state(ctx, ts.queue, id)
	if err != nil {
		return queue.Settled{}, err
	}
	switch {
	case info == nil || info.State == asynq.TaskStateCompleted:
		return queue.Settled{Outcome: queue.Completed, Detail: why + "; another delivery completed the task"}, nil
	case info.State == asynq.TaskStateArchived:
		return queue.Settled{Outcome: queue.Discarded, Detail: why + "; archived: " + info.LastErr}, nil
	case info.State == asynq.TaskStateRetry || info.State == asynq.TaskStateScheduled:
		s.mu.Lock()
		after := max(ts.dueAt.Sub(now), 0)
		s.mu.Unlock()
		return queue.Settled{Outcome: queue.Retry, After: after, Detail: fmt.Sprintf("%s; the task is in %s (retry count %d)", why, info.State, info.Retried)}, nil
	}
	return queue.Settled{Outcome: queue.Retry, Detail: fmt.Sprintf("%s; the task is %s", why, info.State)}, nil
}
