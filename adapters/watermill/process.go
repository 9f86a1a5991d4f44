package twicewatermill

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runtwice/twice/harness"
)

// Worker is one worker process as what it builds once sees it: the
// middleware constructors given with WorkerMiddleware and the handlers of
// EventJob and CommandJob get it when the process starts, before any
// delivery, as production code gets its connections at startup.
type Worker struct {
	// DB is the process's pool, for the whole life of the process: each
	// of its connections reaches the scenario's database through the
	// delivery the process is running at the time, so its statements are
	// that delivery's steps (and take its faults). Use it only while a
	// delivery runs (in a handler or a middleware's per-message code).
	DB *pgxpool.Pool
	// DSN is the process's connection string, for production code that
	// opens its own pool from a DSN at startup (sqlx.Open("postgres",
	// dsn) with lib/pq, database/sql with pgx's stdlib): every
	// connection made with it reaches the scenario's database through
	// the delivery the process runs when it connects, so its statements
	// are that delivery's steps, as DB's are. A delivery's connections
	// are closed when it ends, and the pool reconnects for the next;
	// one made while no delivery runs is closed at once. Use it, as DB,
	// only while a delivery runs.
	DSN string

	p *process
}

// Delivery is the delivery this process is running, or nil between
// deliveries: for the test's fakes (a courier that records its calls with
// Delivery.Effect), not for production code.
func (w *Worker) Delivery() *harness.Delivery {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.current
}

// Now is the harness clock's time, where the process would read
// time.Now; the zero time between deliveries.
func (w *Worker) Now() time.Time {
	if d := w.Delivery(); d != nil {
		return d.Now()
	}
	return time.Time{}
}

// process is one worker process: Watermill's own message.Router, started
// once, with the job's handler behind the user's middleware, fed by an
// in-process subscriber. It must not refer to the worker that owns it, so
// that the worker's cleanup closes it once the harness drops the worker.
type process struct {
	job    *jobSpec
	router *message.Router
	in     *inbox
	worker *Worker
	fwd    *forwarder // Worker.DSN's

	mu      sync.Mutex
	current *harness.Delivery
	port    string // the current delivery's proxy port
	// logged is the last error the router logged per message UUID: a
	// middleware's error, which nacks the message, reaches the harness
	// only there.
	logged map[string]error
}

// routerLogger keeps the errors the router logs, by message UUID.
type routerLogger struct {
	p      *process
	fields watermill.LogFields
}

func (l routerLogger) Error(_ string, err error, fields watermill.LogFields) {
	uuid, _ := fields["message_uuid"].(string)
	if uuid == "" {
		uuid, _ = l.fields["message_uuid"].(string)
	}
	if uuid == "" || err == nil {
		return
	}
	l.p.mu.Lock()
	defer l.p.mu.Unlock()
	l.p.logged[uuid] = err
}

func (routerLogger) Info(string, watermill.LogFields)  {}
func (routerLogger) Debug(string, watermill.LogFields) {}
func (routerLogger) Trace(string, watermill.LogFields) {}
func (l routerLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return routerLogger{p: l.p, fields: l.fields.Add(fields)}
}

// takeLogged returns and forgets the error the router logged for uuid.
func (p *process) takeLogged(uuid string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.logged[uuid]
	delete(p.logged, uuid)
	return err
}

// startProcess builds the worker's router as a Watermill service builds
// its own: middleware made once, the handler added, the router running.
// first is the delivery that starts it, whose DSN names the scenario's
// user and database for Worker.DSN.
func startProcess(job *jobSpec, first *harness.Delivery) (*process, error) {
	p := &process{job: job, in: newInbox(), logged: map[string]error{}}
	p.worker = &Worker{p: p}
	ok := false
	defer func() {
		if !ok {
			p.close()
		}
	}()
	if job.needsPool() {
		pool, err := p.newPool()
		if err != nil {
			return nil, err
		}
		p.worker.DB = pool
		fwd, err := newForwarder(first)
		if err != nil {
			return nil, fmt.Errorf("twicewatermill: job %q: %w", job.name, err)
		}
		p.fwd, p.worker.DSN = fwd, fwd.dsn
	}
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: time.Second}, routerLogger{p: p})
	if err != nil {
		return nil, fmt.Errorf("twicewatermill: job %q: Watermill's router: %w", job.name, err)
	}
	p.router = r
	for _, m := range job.opts.middleware {
		mw, err := m.build(p.worker)
		if err != nil {
			return nil, fmt.Errorf("twicewatermill: job %q: %w", job.name, err)
		}
		r.AddMiddleware(mw)
	}
	if err := job.register(p, r); err != nil {
		return nil, fmt.Errorf("twicewatermill: job %q: adding the handler to Watermill's router: %w", job.name, err)
	}
	go func() { _ = r.Run(context.Background()) }()
	<-r.Running()
	ok = true
	return p, nil
}

// close ends the process's router and pool.
func (p *process) close() {
	if p.router != nil {
		_ = p.router.Close()
	}
	if p.worker.DB != nil {
		p.worker.DB.Close()
	}
	if p.fwd != nil {
		_ = p.fwd.close()
	}
}

// setDelivery makes d the delivery the process's pool reaches.
func (p *process) setDelivery(d *harness.Delivery) error {
	var at url.URL // no delivery: no host, no port
	if d != nil {
		u, err := url.Parse(d.DSN)
		if err != nil {
			return fmt.Errorf("twicewatermill: the delivery's DSN: %w", err)
		}
		at = *u
	}
	p.mu.Lock()
	p.current, p.port = d, at.Port()
	p.mu.Unlock()
	if d == nil && p.worker.DB != nil {
		// The delivery's connections end with it.
		p.worker.DB.Reset()
	}
	if p.fwd != nil {
		p.fwd.setTarget(at.Host)
	}
	return nil
}

// newPool is the process's pool: it dials the current delivery's
// connections and drops a connection of an earlier delivery.
func (p *process) newPool() (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig("postgres://twice@127.0.0.1:1/twice?sslmode=disable")
	if err != nil {
		return nil, fmt.Errorf("twicewatermill: the worker's pool: %w", err)
	}
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		p.mu.Lock()
		d := p.current
		p.mu.Unlock()
		if d == nil {
			return fmt.Errorf("twicewatermill: job %q: the worker's pool (Worker.DB) was used while the process ran no delivery; use it only in a handler or in a middleware's per-message code", p.job.name)
		}
		dc, err := pgx.ParseConfig(d.DSN)
		if err != nil {
			return err
		}
		*cc = *dc
		return nil
	}
	cfg.PrepareConn = func(_ context.Context, c *pgx.Conn) (bool, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return fmt.Sprint(c.Config().Port) == p.port, nil
	}
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	return pgxpool.NewWithConfig(context.Background(), cfg)
}

// worker is what the harness keeps per worker: when it drops it (after a
// crash, or at the end of the scenario), its process is closed.
type worker struct {
	job *jobSpec
	mu  sync.Mutex // guards p: deliveries on one worker may start together
	p   *process
}

func newWorker(job *jobSpec) *worker {
	return &worker{job: job}
}

// started is the worker's process, started on its first delivery.
func (w *worker) started(d *harness.Delivery) (*process, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.p != nil {
		return w.p, nil
	}
	p, err := startProcess(w.job, d)
	if err != nil {
		return nil, err
	}
	w.p = p
	runtime.AddCleanup(w, func(p *process) { p.close() }, p)
	return p, nil
}

// tryKey is the context key of a message's try.
type tryKey struct{}

// try is one message handed to the router: which delivery it belongs to,
// the handlers built for it, and what the handler did with it.
type try struct {
	d       *harness.Delivery
	ctx     context.Context
	handler message.HandlerFunc
	n       int // the try's number in this delivery, from 0

	mu       sync.Mutex
	failure  error // the handler's error, its panic, a failed publish
	panicked bool
	ran      bool
}

func (t *try) record(err error, panicked bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ran = true
	if err != nil {
		t.failure, t.panicked = err, panicked
	}
}

func tryOf(ctx context.Context) *try {
	t, _ := ctx.Value(tryKey{}).(*try)
	return t
}

// errForeignContext is a middleware's message whose context lost the
// delivery's values.
var errForeignContext = errors.New("twicewatermill: a middleware handed the handler a message whose context is not the delivery's; derive a new context from msg.Context()")

// runHandler runs the try's handler as the innermost link of the router's
// chain, recording its error or its panic, which it passes on so that the
// user's middleware and Watermill's router see it as in production.
func runHandler(t *try, call func() ([]*message.Message, error)) (produced []*message.Message, err error) {
	defer func() {
		if r := recover(); r != nil {
			t.record(panicError{value: r}, true)
			panic(r)
		}
	}()
	produced, err = call()
	t.record(err, false)
	for _, m := range produced {
		if m != nil {
			m.SetContext(context.WithValue(m.Context(), tryKey{}, t))
		}
	}
	return produced, err
}

// panicError is a handler's panic.
type panicError struct{ value any }

func (e panicError) Error() string { return fmt.Sprint(e.value) }

// messageHandler is the router's handler for Job: the delivery's own.
func messageHandler(msg *message.Message) ([]*message.Message, error) {
	t := tryOf(msg.Context())
	if t == nil || t.handler == nil {
		return nil, errForeignContext
	}
	return runHandler(t, func() ([]*message.Message, error) { return t.handler(msg) })
}

// inbox is the process's subscriber: the harness's deliveries arrive on
// it, one message at a time, as a broker's subscriber hands them out.
type inbox struct {
	ch   chan *message.Message
	done chan struct{}
	once sync.Once

	mu         sync.Mutex
	closed     bool
	subscribed bool
}

func newInbox() *inbox {
	return &inbox{ch: make(chan *message.Message), done: make(chan struct{})}
}

// Subscribe hands the router the process's messages; a job checks one
// handler.
func (in *inbox) Subscribe(context.Context, string) (<-chan *message.Message, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.subscribed {
		return nil, errors.New("twicewatermill: a second handler subscribed in the worker's router; a job checks one handler")
	}
	in.subscribed = true
	return in.ch, nil
}

// send hands msg to the router.
func (in *inbox) send(ctx context.Context, msg *message.Message) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return errors.New("twicewatermill: the worker's router is closed")
	}
	select {
	case in.ch <- msg:
		return nil
	case <-in.done:
		return errors.New("twicewatermill: the worker's router is closed")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close ends the router's subscription, as the router asks when it closes.
func (in *inbox) Close() error {
	in.once.Do(func() {
		close(in.done)
		in.mu.Lock()
		defer in.mu.Unlock()
		in.closed = true
		close(in.ch)
	})
	return nil
}

// publisher is the router's publisher: each message the handler returns
// is recorded as an effect of the delivery whose message produced it.
type publisher struct {
	p *process
}

func (pub publisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		t := tryOf(m.Context())
		if t == nil {
			return fmt.Errorf("twicewatermill: job %q: the router published message %s that no delivery's handler returned", pub.p.job.name, m.UUID)
		}
		if err := t.d.Effect(t.ctx, EffectKind, m.UUID, published(topic, m), func(context.Context) error { return nil }); err != nil {
			err = fmt.Errorf("publishing message %s: %w", m.UUID, err)
			t.record(err, false)
			return err
		}
	}
	return nil
}

func (publisher) Close() error { return nil }
