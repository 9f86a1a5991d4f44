// Package execute runs one schedule on one database: it starts the
// schedule's deliveries when it says, grants their steps one at a time,
// in its order, through each delivery's wire proxy, injects its faults,
// drives the job's queue, and says what every delivery did.
//
// It knows nothing of testing and nothing of the harness's API: the
// harness hands it an Input whose NewWorker hook turns what the executor
// gives a delivery (Env) into a *harness.Delivery and calls the user's
// handler with it, and judges the Output.
//
// # How a delivery lives
//
// Each delivery has one life, moved only by the events in lifeMoves
// (lifecycle.go):
//
//	waiting ─handOut→ begun ─start→ running ─runLate→ overdue ─cancel→ cancelled
//	           │  ↑                   │ settle: its handler returned and the queue acks or nacks → returned
//	        hold release              │ finish: it returned, with no queue or a lost ack          → settled
//	           ↓  │                   │ die: a crash, a hang, a panic that settled the scenario   → dead
//	           held                   (running, overdue and cancelled alike; returned finishes or dies)
//
// waiting and begun end as undelivered when the queue will never hand
// the delivery out. What a fault does to the step it names is one entry
// per fault kind in stepFaults (stepfaults.go); a crash before the ack
// and a lost ack act on the handler's return (execution.returned).
//
// The event loop (execution.run) is the only goroutine that touches an
// execution: proxies, effect fakes, handlers and queue operations send it
// events.
package execute

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/freshdb"
	"github.com/runtwice/twice/internal/pgserver"
)

// Job is what the executor knows of the job under test.
type Job struct {
	// Name is the job's, for messages.
	Name string
	// Queue is the job's queue; nil is the executor's own model of one
	// (queue.Model): every delivery is handed out, a success is acked, a
	// failure retried after Settings.Rules.Redeliver.
	Queue queue.Queue
}

// Settings are a check's: the same for every schedule it runs.
type Settings struct {
	Job Job
	// Server is asked whether a step that has not returned waits on a
	// lock.
	Server *pgserver.Server
	// DeliveryTimeout bounds each delivery, in real time.
	DeliveryTimeout time.Duration
	// Rules are the queue's timing and tables: Job.Queue's, or
	// queue.Model's when it is nil. Redeliver is how far the clock moves
	// before a job that was not acked is handed out again (zero:
	// faults.DefaultVisibilityTimeout); CancelAfter when a running
	// delivery's context is cancelled (see cancel.go).
	Rules queue.Rules
}

// Executor runs the schedules of one check, one Run each, and keeps what
// outlives one schedule: the server backends deliveries gave back, the
// connection that asks the server about locks, the handler goroutines it
// did not wait for. Close it when the check is over.
type Executor struct {
	job Job
	cfg Settings

	adminMu sync.Mutex
	admin   *pgx.Conn // asks the server about locks; opened on first use

	stragglers stragglers   // handler goroutines not waited for; see linger.go
	backends   backendPools // server backends kept per database; see backends.go
	queueConns queueConns   // the queue's connection kept per database; see queueconns.go
	leftOpen   leftOpen     // deliveries that returned with a transaction open; see leftopen.go
	leftConns  leftOpen     // deliveries that returned with a DSN connection open; see ownconns.go
	outlived   leftOpen     // deliveries whose handler's goroutines outlived the watch; see late.go
}

// New returns an Executor for a check with settings s.
func New(s Settings) *Executor {
	return &Executor{job: s.Job, cfg: s}
}

// Input is one schedule to run, on one database.
type Input struct {
	Schedule faults.Schedule
	DB       *freshdb.Database
	// Retries lets the queue do what a queue does once every scheduled
	// delivery has ended: each job whose last delivery failed is
	// delivered once more, cleanly (with a Queue, for a few rounds).
	Retries bool
	// Clock is the scenario's time, which the executor moves where the
	// schedule says time passes; the handler's Delivery and the effect
	// fakes read the same one.
	Clock Clock
	// NewWorker builds a worker: it is called for every worker number of
	// the schedule that has none alive, and is how the harness turns an
	// Env into the *harness.Delivery a user's handler receives. An error
	// fails the delivery.
	NewWorker func() (Handler, error)
}

// Clock is a scenario's time.
type Clock interface {
	Now() time.Time
	Advance(d time.Duration)
}

// Handler runs one delivery; a worker built by Input.NewWorker.
type Handler func(ctx context.Context, env Env) error

// Env is what the executor gives one delivery: the harness builds a
// *harness.Delivery of it.
type Env struct {
	// Spec is the delivery as the schedule has it ("j1a2w2").
	Spec faults.Scheduled
	// JobID and Attempt are the queue's.
	JobID   string
	Attempt int
	Kind    queue.DeliveryKind
	// Queued is the queue's own record of the job, from Fetch.
	Queued any
	// DB and DSN reach the scenario's database through the delivery's
	// wire proxy; SQL is its *sql.DB, opened on first use.
	DB  *pgxpool.Pool
	DSN string
	SQL *DeliverySQL
	// Effects makes the delivery's effect calls steps of the schedule.
	Effects effects.Steps
}

// DeliveryOutcome is what one delivery did, as a result records it.
type DeliveryOutcome = result.DeliveryOutcome

// Output is what one schedule's execution did.
type Output struct {
	// Deliveries is what each delivery did, in the schedule's order and
	// then the queue's retries, each with the steps it completed.
	Deliveries []DeliveryOutcome
	// Asked is, per delivery, the steps it was granted in the order it
	// asked for them (its completed steps are in completion order, which
	// a lock wait can change); Started says whether it was handed out.
	Asked   [][]faults.Step
	Started []bool
	// Order holds the delivery numbers in the order steps were granted.
	Order []int
	// LockWaits counts the granted steps the server said wait on a lock.
	LockWaits int
	// Races are the choices the execution made by timing, not by the
	// schedule (races.go): run again, the schedule may go the other way.
	Races []result.Race
	// Incomplete says, one line per job, why a job did not complete.
	Incomplete []string
	// CleanFailure says why a clean run failed (an error the queue did
	// not read as a snooze or a cancellation, or a job left incomplete),
	// or is empty.
	CleanFailure string
	// JobStart is how far the clock had moved when the job effectively
	// started: at the first delivery that committed something or made an
	// effect. A clean run started that late is what the scenario must
	// match.
	JobStart time.Duration
	// Overlapped says some deliveries ran at once.
	Overlapped bool
	// Faulted holds the labels of the deliveries a crash, an ambiguous
	// fault or an effect fault hit in the middle of their run.
	Faulted map[string]bool

	ex *execution
}

// Run executes in.Schedule on in.DB. An error is the executor's own
// breakage (a query that failed, a queue operation that failed, the
// server gone), never a finding.
func (r *Executor) Run(ctx context.Context, in Input) (*Output, error) {
	e, err := r.execute(ctx, in)
	if err != nil {
		return nil, err
	}
	out := &Output{Order: e.granted, LockWaits: e.lockWaits, Races: e.races, Incomplete: e.settledProblem(e.incomplete()), CleanFailure: e.cleanFailure(),
		JobStart: e.jobStart(), Overlapped: e.overlapped(), Faulted: e.faulted(), ex: e}
	for _, d := range e.deliveries {
		out.Deliveries = append(out.Deliveries, d.recorded())
		out.Asked = append(out.Asked, d.asked)
		out.Started = append(out.Started, d.life.started())
	}
	return out, nil
}

// Snapshot reads the scenario's tables once the execution is over,
// without the queue's own tables and rows.
func (o *Output) Snapshot(ctx context.Context) (*assert.Snapshot, error) {
	return o.ex.snapshot(ctx)
}

// Written counts the rows the scenario's deliveries wrote and committed,
// from the database's write history: not the queue's own bookkeeping,
// which its connection writes. known is false when the database has no
// history.
func (o *Output) Written(ctx context.Context) (rows int64, known bool, err error) {
	return o.ex.db.Written(ctx, o.ex.queuePIDs()...)
}

// queuePIDs is the backend of the queue's own connection, if the job has
// a queue: what it writes is the queue's bookkeeping.
func (e *execution) queuePIDs() []uint32 {
	if q := e.queue; q != nil && q.pid != 0 {
		return []uint32{q.pid}
	}
	return nil
}

// History reads the rows the scenario's deliveries wrote and committed,
// in order, from the database's write history, each with the delivery
// and step that wrote it (history.go): not the queue's own bookkeeping.
// known is false when the database has no history.
func (o *Output) History(ctx context.Context) (_ []Written, known bool, _ error) {
	ws, known, err := o.ex.db.History(ctx, o.ex.queuePIDs()...)
	if err != nil || !known {
		return nil, known, err
	}
	return o.ex.attribute(ws), true, nil
}

// Close parks the kept backends and queue connections of the databases
// given back for the next check on them, and the connection that asks
// about locks for the next check on the server (backends.go), and ends
// the others.
func (r *Executor) Close(ctx context.Context) {
	r.backends.close(ctx, &r.queueConns)
	r.adminMu.Lock()
	defer r.adminMu.Unlock()
	// What is parked must leave the server room for everything else
	// (its clones' kept connections, other test binaries on a shared
	// server): the oldest go first when it has little.
	over := 0
	if room, err := r.serverRoom(ctx); err != nil {
		over = maxParked // unknown: park nothing
	} else if room < 0 {
		over = -room
	}
	parking.shed(ctx, over)
	if r.admin != nil {
		parking.parkAdmin(ctx, r.cfg.Server.ConnString(""), r.admin)
		r.admin = nil
	}
}

// serverRoom is how many more client sessions the server takes before
// a quarter of its max_connections is all that is left, under r.adminMu;
// negative when fewer are left.
func (r *Executor) serverRoom(ctx context.Context) (int, error) {
	if err := r.connectAdmin(ctx, "how many sessions it has"); err != nil {
		return 0, err
	}
	var room int
	err := r.admin.QueryRow(ctx, `SELECT m - m / 4 - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')
		FROM (SELECT current_setting('max_connections')::int AS m) s`).Scan(&room)
	return room, err
}

// GiveBack gives db back after a scenario or a clean run, sparing from
// its reset the server backends its deliveries left idle.
func (r *Executor) GiveBack(ctx context.Context, db *freshdb.Database) error {
	return r.giveBack(ctx, db)
}

// StillRunning is the note about handler goroutines of ended deliveries
// that have not returned by now, or "" when every one has.
func (r *Executor) StillRunning() string { return r.stillRunning() }

// BackendCounts are the server backends the deliveries' proxies started
// and the connections deliveries made, so far in this process.
func BackendCounts() (started, connects int64) {
	return backendsStarted.Load(), deliveryConnects.Load()
}

func (r *Executor) visibilityTimeout() time.Duration {
	return cmp.Or(r.cfg.Rules.Redeliver, faults.DefaultVisibilityTimeout)
}

// connectAdmin opens r.admin, under r.adminMu, if it is not open; what
// says what the harness means to ask the server.
func (r *Executor) connectAdmin(ctx context.Context, what string) error {
	if r.admin != nil {
		return nil
	}
	if r.admin = parking.takeAdmin(ctx, r.cfg.Server.ConnString("")); r.admin != nil {
		return nil
	}
	conn, err := pgx.Connect(ctx, r.cfg.Server.ConnString(""))
	if err != nil && serverWentAway(err) {
		return fmt.Errorf("%w: connecting to ask it %s: %w", ErrServerWentAway, what, err)
	}
	if err != nil {
		return fmt.Errorf("connecting to ask the server %s: %w", what, err)
	}
	r.admin = conn
	return nil
}

// blockedBy asks the server which backends backend pid waits for: those
// holding a lock it waits on, or ahead of it in that lock's queue
// (pg_blocking_pids). None: it waits on no lock.
func (r *Executor) blockedBy(ctx context.Context, pid uint32) ([]uint32, error) {
	r.adminMu.Lock()
	defer r.adminMu.Unlock()
	if err := r.connectAdmin(ctx, "about locks"); err != nil {
		return nil, err
	}
	var pids []int32
	err := r.admin.QueryRow(ctx, `SELECT pg_blocking_pids($1)`, int32(pid)).Scan(&pids)
	if err != nil && serverWentAway(err) {
		// The server terminates this session first when it shuts down
		// (57P01), often before the delivery sees anything.
		return nil, fmt.Errorf("%w: asking whether backend %d waits on a lock: %w", ErrServerWentAway, pid, err)
	}
	if err != nil {
		return nil, fmt.Errorf("asking whether backend %d waits on a lock: %w", pid, err)
	}
	by := make([]uint32, len(pids))
	for i, p := range pids {
		by[i] = uint32(p)
	}
	return by, nil
}

// ErrServerWentAway marks the errors of a check that ran into the
// server stopping: the check could not run, and the job is not to blame.
var ErrServerWentAway = errors.New("the PostgreSQL server went away")

// serverWentAway reports whether err, from connecting to the server, says
// the server is gone or going: refused, reset, no socket, or shutting down
// (SQLSTATE class 57P). Other server errors (too many clients, a bad
// password) and cancellations are not.
func serverWentAway(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "57P")
	}
	return true
}

func jobID(n int) string { return fmt.Sprintf("twice-job-%d", n) }

// snapshotters holds one assert.Snapshotter per template database, so
// the catalog is read once for all the databases made from it (and again
// after a handler's DDL, which the Snapshotter notices).
var snapshotters sync.Map // *freshdb.Template -> *assert.Snapshotter

// snapshot reads the scenario's tables, on the harness's kept connection to
// the database when there is one (warm caches, one round trip), otherwise
// on a new one.
func snapshot(ctx context.Context, db *freshdb.Database) (*assert.Snapshot, error) {
	// A big table with a primary key is read in part, through the write
	// history: only the rows the scenario wrote (assert.Written).
	s, _ := snapshotters.LoadOrStore(db.Template(), &assert.Snapshotter{PartialFrom: db.Template().UndoFrom()})
	snapshotter := s.(*assert.Snapshotter)
	conn := db.KeptConn()
	kept := conn != nil
	if !kept {
		var err error
		conn, err = pgx.Connect(ctx, db.ConnString)
		if err != nil {
			return nil, fmt.Errorf("connecting to snapshot %s: %w", db.Name, err)
		}
		defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	}
	// The server's change log says which tables the scenario wrote; the
	// others hold the template's rows, which the snapshotter reads once
	// and shares.
	var changed func(schema, table string) bool
	if kept {
		ch, err := db.Changed(ctx)
		if err != nil {
			return nil, fmt.Errorf("snapshot of %s: %w", db.Name, err)
		}
		if ch.Known {
			changed = func(schema, table string) bool { return ch.Tables[freshdb.TableID{Schema: schema, Name: table}] }
		}
	}
	snap, err := snapshotter.TakeChanged(ctx, conn, changed)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", db.Name, err)
	}
	return snap, nil
}
