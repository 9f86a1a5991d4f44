package twiceasynq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/runtwice/twice/harness/queue"
)

// Producing is what the producer's own code is given for one enqueue of
// the task (Producer): the original's, or one of the producer's copies.
type Producing struct {
	// Client is an asynq client on the scenario's Redis: call Enqueue or
	// EnqueueContext on it as production calls it on its client, with the
	// task and options the producer builds (TaskID, Unique, ProcessIn,
	// Retention).
	Client *asynq.Client
	// Now is the harness clock at this enqueue: give it to the producer
	// where production reads time.Now() for what it stamps into the
	// task's payload. asynq's client schedules on the wall clock: build
	// ProcessAt from time.Now() (or use ProcessIn), not from Now, which
	// asynq takes for a time long past and enqueues at once.
	Now func() time.Time
	// Copy is 1 for the original enqueue, 2 and up for the producer's
	// copies (faults.ProducerRetry, faults.LateProducerRetry).
	Copy int
}

// Producer runs the producer's own code for every enqueue of the task,
// instead of enqueueing Job's task with Enqueue's options: the
// original's, and each producer copy's at the copy's time on the harness
// clock (the late-producer-retry copy comes harness.Config.ProducerTimeout,
// 5s, after the original). Pass production's function unchanged, wired
// to p:
//
//	twiceasynq.Producer(func(ctx context.Context, p twiceasynq.Producing) error {
//		return welcome.Enqueue(ctx, p.Client, p.Now(), 42)
//	})
//
// The code must enqueue one task of Job's task type, into the queue the
// Job's task names, in one call. A copy asynq refuses (ErrDuplicateTask,
// ErrTaskIDConflict, returned by the code or not) or whose code enqueues
// nothing (it found its earlier enqueue) is not delivered. The task's
// options are asynq's as the code gave them: Unique's lock and Retention
// run on the harness clock as Enqueue's do. Without a TaskID asynq draws a
// random one, which differs between clean runs. Job's task then serves to
// name the type and queue, and its options give Rules (a Unique TTL, a
// TaskID's hold); with none, the copy after the producer's timeout is
// tried too (Rules.Dedup -1).
func Producer(produce func(ctx context.Context, p Producing) error) Option {
	return func(o *options) { o.produce = produce }
}

// produce runs the producer's code for the enqueue op asks for and
// answers with the task of Job's type it enqueued.
func (q *asynqQueue) produce(ctx context.Context, op queue.Op, s *scenario) (queue.Enqueued, error) {
	which := fmt.Sprintf("twiceasynq: job %q: the producer's code (twiceasynq.Producer), enqueue %d", q.name, op.Job)
	if err := s.expireUnique(ctx, op.Now); err != nil {
		return queue.Enqueued{}, err
	}
	if err := s.expireRetained(ctx, op.Now); err != nil {
		return queue.Enqueued{}, err
	}
	before, err := s.taskKeys(ctx)
	if err != nil {
		return queue.Enqueued{}, fmt.Errorf("%s: %w", which, err)
	}
	now := op.Now
	wall := time.Now()
	perr := queue.RunProducer(ctx, q.opts.produce, Producing{Client: s.client, Now: func() time.Time { return now }, Copy: op.Job})
	after, err := s.taskKeys(ctx)
	if err != nil {
		return queue.Enqueued{}, fmt.Errorf("%s: %w", which, err)
	}
	typ := q.task.Type()
	var made []*asynq.TaskInfo
	for key := range after {
		if before[key] {
			continue
		}
		qname, id, ok := taskOfKey(key)
		if !ok {
			continue
		}
		info, err := s.insp.GetTaskInfo(qname, id)
		if err != nil {
			return queue.Enqueued{}, fmt.Errorf("%s: reading task %s: %w", which, id, err)
		}
		made = append(made, info)
	}
	if perr != nil {
		refused := errors.Is(perr, asynq.ErrDuplicateTask) || errors.Is(perr, asynq.ErrTaskIDConflict)
		if !refused || slices.ContainsFunc(made, func(info *asynq.TaskInfo) bool { return info.Type == typ }) {
			return queue.Enqueued{}, fmt.Errorf("%s returned: %w", which, perr)
		}
		return queue.Enqueued{Duplicate: true, Reason: fmt.Sprintf("asynq's client: %v", perr)}, nil
	}
	info, dup, err := queue.FollowOne(queue.ProducerCall{Which: which, Job: op.Job, Verb: "enqueued", Kind: typ,
		One: "task of type %q", Many: "tasks of type %q", Per: "task per enqueue",
		Follows: "the task it enqueues: call Enqueue on Producing.Client"},
		made, func(info *asynq.TaskInfo) string { return info.Type })
	if err != nil || dup.Duplicate {
		return dup, err
	}
	if info.Queue != q.msg.queue {
		return queue.Enqueued{}, fmt.Errorf("%s enqueued into queue %q, but Job's task names queue %q, the one the check's server works: give Job's task asynq.Queue(%q)", which, info.Queue, q.msg.queue, info.Queue)
	}
	m := message{taskID: info.ID, queue: info.Queue, maxRetry: info.MaxRetry, timeout: info.Timeout, deadline: info.Deadline, retention: info.Retention}
	if info.State == asynq.TaskStateScheduled {
		m.processAt = info.NextProcessAt
	}
	task := asynq.NewTask(info.Type, info.Payload)
	if key := uniqueKey(info.Queue, info.Type, info.Payload); key != "" {
		ttl, err := s.rdb.TTL(ctx, key).Result()
		if err != nil {
			return queue.Enqueued{}, fmt.Errorf("%s: reading the Unique lock %s: %w", which, key, err)
		}
		if ttl > 0 {
			m.uniqueTTL = ttl.Round(time.Second)
		}
	}
	return s.enqueued(ctx, op, info, task, m, wall)
}

// taskKeys is the set of asynq's task hashes in the scenario's Redis.
func (s *scenario) taskKeys(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	iter := s.rdb.Scan(ctx, 0, "asynq:{*}:t:*", 100).Iterator()
	for iter.Next(ctx) {
		out[iter.Val()] = true
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("listing asynq's tasks: %w", err)
	}
	return out, nil
}

// taskOfKey reads the queue and ID from a task hash's key,
// "asynq:{queue}:t:id".
func taskOfKey(key string) (qname, id string, ok bool) {
	rest, ok := strings.CutPrefix(key, "asynq:{")
	if !ok {
		return "", "", false
	}
	qname, id, ok = strings.Cut(rest, "}:t:")
	return qname, id, ok && id != ""
}
