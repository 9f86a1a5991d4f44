package twiceasynq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// waitLimit bounds every wait on asynq's own goroutines (a dequeue, a
// write after the handler returned): they take milliseconds, so reaching
// it means asynq did not do what the adapter expects of it.
const waitLimit = 20 * time.Second

// poll is how often the adapter looks at Redis while it waits on asynq.
const poll = time.Millisecond

// scenario is one execution's asynq: its Redis database, the harness's
// client and inspector on it, and the workers (asynq servers) its
// deliveries ran on. It is found by the harness's connection, which is
// one per execution; it ends when the context of its queue operations
// does (see watch).
type scenario struct {
	q      *asynqQueue
	conn   *pgx.Conn
	redis  *redisServer
	db     int
	rdb    *redis.Client
	client *asynq.Client
	insp   *asynq.Inspector

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced when a worker takes a task
	tasks    map[string]*taskState
	workers  []*worker
	taken    map[string]*delivery // dequeued by a processor, not yet handed out
	uniqueAt map[string]time.Time // Unique lock key -> when its TTL ends on the harness clock

	watchOnce sync.Once
}

// taskState is what the adapter keeps of a task besides what asynq keeps.
type taskState struct {
	queue string
	// dueAt is when a scheduled or retrying task is due on the harness
	// clock.
	dueAt time.Time
	// holder is the delivery handed out last and not yet settled.
	holder *delivery
	// retainedUntil is when a task completed with Retention leaves
	// Redis on the harness clock (zero: not retained).
	retainedUntil time.Time
	// retention is the task's Retention, as it was enqueued.
	retention time.Duration
}

// worker is one asynq.Server, as one worker process: its Redis client
// can be cut (every command fails) as a dead process's connection.
type worker struct {
	srv      *asynq.Server
	rdb      *redis.Client
	cut      atomic.Bool
	busy     atomic.Bool
	stopping atomic.Bool
	stopOnce sync.Once
}

// delivery is one task asynq's processor handed to the adapter's bridge
// handler: the task and context it made, and where the handler's result
// goes back to it.
type delivery struct {
	s       *scenario
	w       *worker
	id      string
	ctx     context.Context
	task    *asynq.Task
	result  chan error
	started time.Time // on the harness clock, when handed out
	info    *asynq.TaskInfo

	mu        sync.Mutex
	cancelled bool // the harness cancelled the handler's context
	settled   bool
}

func (d *delivery) markCancelled() {
	d.mu.Lock()
	d.cancelled = true
	d.mu.Unlock()
}

var (
	regMu      sync.Mutex
	scenarios  = map[*pgx.Conn]*scenario{}
	deliveries = map[*asynq.TaskInfo]*delivery{}
)

func deliveryOf(info *asynq.TaskInfo) *delivery {
	regMu.Lock()
	defer regMu.Unlock()
	return deliveries[info]
}

// scenarioOf is the scenario of the harness's connection conn.
func scenarioOf(conn *pgx.Conn) (*scenario, error) {
	regMu.Lock()
	defer regMu.Unlock()
	s := scenarios[conn]
	if s == nil {
		return nil, errors.New("twiceasynq: no scenario was started on this connection (Enqueue of job 1 starts it)")
	}
	return s, nil
}

// newScenario takes a Redis database for a new execution and flushes it.
func (q *asynqQueue) newScenario(ctx context.Context, conn *pgx.Conn) (*scenario, error) {
	rs, err := theRedis(ctx)
	if err != nil {
		return nil, err
	}
	db, err := rs.take()
	if err != nil {
		return nil, err
	}
	rdb := rs.client(db)
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		_ = rdb.Close()
		rs.give(db)
		return nil, fmt.Errorf("twiceasynq: flushing database %d of %s: %w", db, rs.where, err)
	}
	s := &scenario{q: q, conn: conn, redis: rs, db: db, rdb: rdb,
		client: asynq.NewClientFromRedisClient(rdb), insp: asynq.NewInspectorFromRedisClient(rdb),
		changed: make(chan struct{}), tasks: map[string]*taskState{}, taken: map[string]*delivery{}, uniqueAt: map[string]time.Time{}}
	regMu.Lock()
	scenarios[conn] = s
	regMu.Unlock()
	return s, nil
}

// watch ends the scenario once ctx is done: the harness cancels the
// context of its queue operations when the execution is over, just
// before it closes its connection.
func (s *scenario) watch(ctx context.Context) {
	s.watchOnce.Do(func() {
		context.AfterFunc(ctx, func() {
			regMu.Lock()
			// The harness keeps its connection for the next scenario on
			// the database, which may have started its own by now.
			if scenarios[s.conn] == s {
				delete(scenarios, s.conn)
			}
			regMu.Unlock()
			s.end()
		})
	})
}

// end shuts the scenario's workers down, flushes its database (only after
// Shutdown: asynq's heartbeater writes until then) and returns it.
func (s *scenario) end() {
	s.mu.Lock()
	ws := s.workers
	s.workers = nil
	s.mu.Unlock()
	for _, w := range ws {
		w.stop()
	}
	regMu.Lock()
	for info, d := range deliveries {
		if d.s == s {
			delete(deliveries, info)
		}
	}
	regMu.Unlock()
	ctx := context.Background()
	err := s.rdb.FlushDB(ctx).Err()
	_ = s.rdb.Close()
	if err == nil {
		s.redis.give(s.db)
	}
}

// stop shuts the worker's server down; a task it dequeued and still
// holds is handed back to pending by asynq's processor (its shutdown
// timeout is 1ms).
func (w *worker) stop() {
	w.stopping.Store(true)
	w.stopOnce.Do(func() {
		w.srv.Shutdown()
		_ = w.rdb.Close()
	})
}

// retire stops worker w in the background, as a worker process exits
// once its delivery is over, so that it dequeues nothing more.
func (s *scenario) retire(w *worker) {
	w.stopping.Store(true)
	s.mu.Lock()
	s.workers = slices.DeleteFunc(s.workers, func(x *worker) bool { return x == w })
	s.mu.Unlock()
	go w.stop()
}

// cutHook fails every command of a cut worker's client.
type cutHook struct{ w *worker }

func (h cutHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (netConn net.Conn, err error) {
		if h.w.cut.Load() {
			return nil, errCut
		}
		return next(ctx, network, addr)
	}
}

func (h cutHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.w.cut.Load() {
			cmd.SetErr(errCut)
			return errCut
		}
		return next(ctx, cmd)
	}
}

func (h cutHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.w.cut.Load() {
			for _, c := range cmds {
				c.SetErr(errCut)
			}
			return errCut
		}
		return next(ctx, cmds)
	}
}

// quiet drops asynq's logs: a cut worker's errors are the check's doing.
type quiet struct{}

func (quiet) Debug(...any) {}
func (quiet) Info(...any)  {}
func (quiet) Warn(...any)  {}
func (quiet) Error(...any) {}
func (quiet) Fatal(...any) {}

// startWorker starts a new asynq server on the scenario's database. Its
// recoverer runs at once, taking back tasks whose lease expired.
func (s *scenario) startWorker() (*worker, error) {
	w := &worker{rdb: s.redis.client(s.db)}
	w.rdb.AddHook(cutHook{w})
	never := 24 * time.Hour
	cfg := asynq.Config{
		Concurrency:              1,
		Queues:                   map[string]int{s.q.msg.queue: 1},
		RetryDelayFunc:           s.q.opts.retryDelay,
		IsFailure:                s.q.opts.isFailure,
		Logger:                   quiet{},
		LogLevel:                 asynq.FatalLevel,
		TaskCheckInterval:        20 * time.Millisecond,
		ShutdownTimeout:          time.Millisecond,
		DelayedTaskCheckInterval: never, // the adapter runs due tasks on the harness clock
		JanitorInterval:          never,
		HealthCheckInterval:      never,
	}
	w.srv = asynq.NewServerFromRedisClient(w.rdb, cfg)
	if err := w.srv.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error { return s.bridge(w, ctx, t) })); err != nil {
		_ = w.rdb.Close()
		return nil, fmt.Errorf("twiceasynq: starting an asynq server on database %d of %s: %w", s.db, s.redis.where, err)
	}
	s.mu.Lock()
	s.workers = append(s.workers, w)
	s.mu.Unlock()
	return w, nil
}

// bridge is the handler asynq's processor calls: it hands the task to the
// harness's delivery and returns the production handler's result to the
// processor, which records it.
func (s *scenario) bridge(w *worker, ctx context.Context, t *asynq.Task) error {
	id, _ := asynq.GetTaskID(ctx)
	d := &delivery{s: s, w: w, id: id, ctx: ctx, task: t, result: make(chan error, 1)}
	w.busy.Store(true)
	defer w.busy.Store(false)
	s.mu.Lock()
	s.taken[id] = d
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	select {
	case err := <-d.result:
		return err
	case <-ctx.Done():
		// The server shut down (it hands the task back) or the lease
		// ran out: a task never handed out is no longer taken.
		s.mu.Lock()
		if s.taken[id] == d {
			delete(s.taken, id)
		}
		s.mu.Unlock()
		return ctx.Err()
	}
}

// state is the task's state in asynq, or nil when asynq deleted it.
func (s *scenario) state(ctx context.Context, qname, id string) (*asynq.TaskInfo, error) {
	info, err := s.insp.GetTaskInfo(qname, id)
	switch {
	case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("asynq's Inspector.GetTaskInfo(%q, %q): %w", qname, id, err)
	}
	return info, ctx.Err()
}

// awaitTaken waits until a processor has dequeued task id, starting a
// worker when none is idle.
func (s *scenario) awaitTaken(ctx context.Context, id string) (*delivery, error) {
	limit := time.NewTimer(waitLimit)
	defer limit.Stop()
	for {
		s.mu.Lock()
		d := s.taken[id]
		if d != nil && d.w.stopping.Load() {
			// Dequeued by a worker that is exiting: its processor hands
			// the task back to pending, and another worker takes it.
			d = nil
		}
		if d != nil {
			delete(s.taken, id)
		}
		idle := false
		for _, w := range s.workers {
			if !w.cut.Load() && !w.busy.Load() && !w.stopping.Load() {
				idle = true
			}
		}
		changed := s.changed
		s.mu.Unlock()
		if d != nil {
			return d, nil
		}
		if !idle {
			if _, err := s.startWorker(); err != nil {
				return nil, err
			}
		}
		select {
		case <-changed:
		case <-time.After(25 * time.Millisecond):
		case <-limit.C:
			return nil, fmt.Errorf("twiceasynq: asynq's processor did not dequeue task %s within %v although it is pending", id, waitLimit)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// awaitWritten waits until the task has left the active state (or asynq
// deleted it): the processor or the recoverer wrote what it decided.
func (s *scenario) awaitWritten(ctx context.Context, qname, id string) (*asynq.TaskInfo, error) {
	deadline := time.Now().Add(waitLimit)
	for {
		info, err := s.state(ctx, qname, id)
		if err != nil || info == nil || info.State != asynq.TaskStateActive {
			return info, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("twiceasynq: task %s is still active %v after asynq should have recorded its end", id, waitLimit)
		}
		time.Sleep(poll)
	}
}
