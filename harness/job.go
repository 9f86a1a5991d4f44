package harness

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/execute"
)

// Handler runs one delivery of a job. It returns nil when the job is done;
// an error makes the queue deliver it again.
//
// Return the error the queue would see: it decides whether the queue
// delivers the job again. A production worker whose wrapper logs an error
// and returns nil is acked even when the job failed, and never retried.
// Check the job as it runs there: call the wrapper itself, or do what it
// does in an adapter closure in the test, without changing the job's
// code. Calling the inner function, which returns its errors, makes the
// harness retry where the queue would not, and hides a job left half done:
//
//	Handler: func(ctx context.Context, d *harness.Delivery) error {
//		if err := billing.CancelSubscription(ctx, d.DB, 77); err != nil {
//			log.Printf("cancel: %v", err) // as the worker's wrapper does: log, then ack
//		}
//		return nil
//	},
type Handler func(ctx context.Context, d *Delivery) error

// Job is the handler under test. Set exactly one of Handler and NewWorker.
// The handler returns the error the queue would see (see Handler): a
// worker whose wrapper logs errors and returns nil is checked through the
// wrapper, or through a closure in the test that does the same.
type Job struct {
	// Name identifies the job in messages and reports: "reward-order".
	Name string
	// Handler runs every delivery. Use it when the handler keeps no state
	// in memory between deliveries.
	Handler Handler
	// NewWorker builds a worker: the handler together with its in-memory
	// state (a cache, an in-process dedup map, a middleware instance). A
	// crashed worker is discarded and the redelivery runs on a freshly
	// built one, as after a real crash.
	NewWorker func() Handler
	// Queue is the job's queue (a queue adapter sets it): the harness
	// applies its schema before Config.Setup, enqueues the job, hands it
	// out and acks or nacks each delivery through it, on its own
	// connection, so the queue's bookkeeping is not the handler's steps,
	// and its rules say when it redelivers and cancels. nil is
	// queue.Model{}, the harness's own model of a queue; set a
	// queue.Model to change its visibility timeout.
	Queue queue.Queue
}

// Delivery is one invocation of the handler, as a queue makes it. Each
// delivery has its own database connections.
type Delivery struct {
	// JobID is the queue's ID for the job. A redelivery carries the same
	// ID; a producer retry carries a new one.
	JobID string
	// Attempt counts deliveries of JobID, from 1; with a Queue it is the
	// queue's own counter.
	Attempt int
	// Kind is why the queue handed the job out this time: its first
	// delivery, a redelivery after a crash or a lost ack, a producer
	// copy, a redrive, the queue's retry.
	Kind queue.DeliveryKind
	// Queued is the queue's own record of the job as it handed it out,
	// set by a queue adapter (River: *rivertype.JobRow); nil without one.
	Queued any
	// DB is a pool of this delivery's own connections to the scenario's
	// database. It is closed when the delivery ends.
	DB *pgxpool.Pool
	// DSN connects other drivers to the same database as this delivery,
	// on connections of its own: a URL on 127.0.0.1 with no password and
	// sslmode=disable, which pgx, database/sql over pgx's stdlib, lib/pq,
	// GORM and bun's pgdriver all accept. For database/sql, SQL opens and
	// closes one for you.
	DSN string

	clock *clock
	fx    *effects.Clients     // effect fakes; see effects.go
	sqlDB *execute.DeliverySQL // Delivery.SQL's *sql.DB
}

// SQL is a *sql.DB on the delivery's own connections, through pgx's
// database/sql driver: the same one on every call of the delivery,
// opened on the first and closed by the harness when the delivery ends.
// Hand it to code written for database/sql (sqlc's generated New, GORM's
// postgres.New(postgres.Config{Conn: db}), bun.NewDB with pgdialect,
// ent's entsql.OpenDB, sqlx.NewDb) instead of opening and closing one
// on Delivery.DSN yourself. Its statements are steps like those on
// Delivery.DB. Do not close it and do not keep it past the handler's
// return.
//
// It fails only on a Delivery the harness did not make, or after the
// delivery ended (a handler goroutine that outlived its delivery).
func (d *Delivery) SQL() (*sql.DB, error) {
	if d == nil || d.sqlDB == nil {
		return nil, blame.Userf("Delivery.SQL: this Delivery was not made by the harness, so it has no connections; use the *Delivery the harness passes to the handler")
	}
	return d.sqlDB.Open()
}

// Now is the harness clock's time. Use it where the handler would call
// time.Now, so faults that move the clock (a visibility timeout, a redrive
// days later) reach the handler, and timestamps the handler writes compare
// exactly with the clean run's.
func (d *Delivery) Now() time.Time { return d.clock.seenNow() }

// defaultClockStart is where every scenario's clock starts unless
// Config.ClockStart says otherwise.
var defaultClockStart = time.Date(2026, time.January, 1, 9, 0, 0, 0, time.UTC)

// clock is a scenario's time. It starts at Config.ClockStart in every
// scenario and both clean reference runs, and does not follow the wall
// clock: it stands still until the harness moves it where a fault says
// time passes (a redelivery after the visibility timeout, a redrive). So a
// value taken from it compares exactly between clean runs, and differs
// only by a move a fault made.
type clock struct {
	mu  sync.Mutex
	now time.Time
	// seen counts the reads the job could see: Delivery.Now and the
	// effect providers (a payment's Created, a key's window).
	seen atomic.Int64
}

func newClock(start time.Time) *clock { return &clock{now: start} }

// Now returns the current harness time.
func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// seenNow is Now, read on the job's behalf.
func (c *clock) seenNow() time.Time {
	c.seen.Add(1)
	return c.Now()
}

// Advance moves the clock forward by d.
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// resolveQueue is the job's queue as the harness runs it: the queue the
// executor drives (nil for queue.Model, which the executor models itself,
// with no connection of its own and no queue operations in its reports)
// and the rules that time it, the only place a check's queue timing comes
// from.
func (j Job) resolveQueue() (queue.Queue, queue.Rules, error) {
	var model queue.Model
	switch q := j.Queue.(type) {
	case nil:
	case queue.Model:
		model = q
	case *queue.Model:
		if q == nil {
			return nil, queue.Rules{}, blame.Userf("job %q: Job.Queue is a nil *queue.Model; leave Queue nil for the default model", j.Name)
		}
		model = *q
	default:
		rules := q.Rules()
		if err := checkRules(rules); err != nil {
			return nil, queue.Rules{}, blame.Userf("job %q: its queue %T's %w", j.Name, q, err)
		}
		return q, rules, nil
	}
	if model.VisibilityTimeout < 0 {
		return nil, queue.Rules{}, blame.Userf("job %q: queue.Model.VisibilityTimeout is %v; want zero (%v) or more", j.Name, model.VisibilityTimeout, faults.DefaultVisibilityTimeout)
	}
	return nil, model.Rules(), nil
}

// checkRules says what is wrong with a queue's rules, or nothing.
func checkRules(r queue.Rules) error {
	switch {
	case r.Redeliver < 0:
		return fmt.Errorf("Rules.Redeliver is %v; want zero (%v) or more", r.Redeliver, faults.DefaultVisibilityTimeout)
	case r.CancelAfter < 0:
		return fmt.Errorf("Rules.CancelAfter is %v; want zero (never cancel) or more", r.CancelAfter)
	case (r.JobTable == "") != (r.JobIDColumn == ""):
		return fmt.Errorf("Rules.JobTable is %q and Rules.JobIDColumn %q; set both or neither", r.JobTable, r.JobIDColumn)
	}
	return nil
}

// Mail returns the delivery's mail sender (package effects). Its emails go
// to the scenario's effect log, where the oracle compares them with one
// clean run's.
func (d *Delivery) Mail() *effects.Mailer { return d.fakes().Mail() }

// Payments returns the delivery's payment provider, with Stripe's
// idempotency keys (package effects). Its payments go to the scenario's
// effect log, where the oracle compares them with one clean run's.
func (d *Delivery) Payments() *effects.Payments { return d.fakes().Payments() }

// Effect makes a call to a system outside the database (the user's own
// SMS, push or webhook client) a recorded effect: the harness records it
// in the scenario's effect log, where the oracle judges it by its kind's
// policy (assert.Policy), and treats it as a step of the delivery, so a
// fault can kill the delivery just before the call or right after the
// provider accepted it.
//
// kind names the kind of effect ("sms") for policies and reports. key is
// the idempotency key the call sends, or empty; it is printed, not
// compared. payload is what the call asks for, as plain data that
// encoding/json can encode; two effects with the same kind and payload are
// the same effect, so put in it what makes the effect itself, and
// nothing that changes between runs of a correct handler (a timestamp, a
// random ID). call makes the real call; an error from it means the effect
// did not happen and is returned as it is.
//
// When the delivery is dead (a fault killed it) Effect returns an error
// without calling call, and nothing is recorded. Under an effect fault
// it returns a *effects.CallError: after calling call when the provider's
// answer was lost (the effect counts as made), without calling it when
// the provider refused.
//
// To check a handler that takes a client interface, hand it a wrapper that
// sends every call through Effect and on to a fake or a sandbox client:
//
//	type recordedSMS struct {
//		d    *harness.Delivery
//		next SMSClient
//	}
//
//	func (s recordedSMS) Send(ctx context.Context, to, text string) error {
//		return s.d.Effect(ctx, "sms", "", map[string]string{"to": to, "text": text},
//			func(ctx context.Context) error { return s.next.Send(ctx, to, text) })
//	}
func (d *Delivery) Effect(ctx context.Context, kind, key string, payload any, call func(ctx context.Context) error) error {
	return d.fakes().Record(ctx, kind, key, payload, call)
}

// fakes returns d's effect clients, or nil for a Delivery the harness did
// not make, whose clients answer every call with an error saying so.
func (d *Delivery) fakes() *effects.Clients {
	if d == nil {
		return nil
	}
	return d.fx
}

// HTTPClient returns the delivery's HTTP client (package effects): hand it
// to the SDK or code that makes HTTP calls, where production passes its
// own (stripe-go's BackendConfig.HTTPClient, an AWS SDK's HTTPClient
// option). Whatever host a request names it reaches, through a real
// net/http Transport, the scenario's provider of that host
// (Config.Providers.HTTP: api.stripe.com is Stripe-shaped, any other host
// generic), and every attempt, an SDK's own retries included, is a step
// of the delivery and, unless it only reads (GET), an effect: kind from
// the host, key from the Idempotency-Key header, payload the method, path
// and canonical body. A
// dead delivery's requests fail and are not recorded.
func (d *Delivery) HTTPClient() *http.Client { return d.fakes().HTTPClient() }

// HTTPBaseURL returns a base URL that reaches host's provider through
// HTTPClient, for an SDK that wants a URL of its own; most do not need
// it, since HTTPClient routes every host.
func (d *Delivery) HTTPBaseURL(host string) string { return d.fakes().HTTPBaseURL(host) }

// SMTPAddr returns the address ("127.0.0.1:41873") of the delivery's SMTP
// sink: point the job's own SMTP client at it where production points it
// at its relay, and every message it sends is an email effect of this
// delivery, recorded in the scenario's effect log (no deduplication, as
// a relay does none). With net/smtp:
//
//	addr := d.SMTPAddr()
//	host, _, _ := net.SplitHostPort(addr) // "127.0.0.1"
//	auth := smtp.PlainAuth("", "user", "secret", host)
//	err := smtp.SendMail(addr, auth, from, to, msg)
//
// The sink offers AUTH PLAIN without TLS and takes any credentials;
// PlainAuth agrees to that only for a host of 127.0.0.1 (or localhost)
// equal to the one dialled, which the address gives. The end of each
// message's DATA is a step of the delivery, so the default fault matrix
// covers every message as it covers every effect: a crash just before or
// right after it, a lost reply (the message was sent; the sink cuts the
// connection instead of answering), a refusal ("451 4.3.0", not sent).
// A dead delivery's messages and sessions are refused and not recorded.
// The sink is started on the first call and stopped when the scenario
// ends. See effects.SMTPMessage for what is compared.
func (d *Delivery) SMTPAddr() string { return d.fakes().SMTPAddr() }
