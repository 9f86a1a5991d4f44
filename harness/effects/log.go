package effects

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/internal/blame"
)

// Providers sets up the providers every scenario, and each clean reference
// run, gets afresh: harness.Config.Providers. The zero value is the
// default of each.
type Providers struct {
	// Payments is the payment provider behind Payments.
	Payments PaymentProvider
	// HTTP is the providers behind every delivery's HTTPClient.
	HTTP HTTPProviders
	// SMTP is the sink behind every delivery's SMTPAddr.
	SMTP SMTPProvider
}

// SMTPProvider sets up the SMTP sink behind Clients.SMTPAddr.
type SMTPProvider struct {
	// PermanentRefusal makes an effect-failed fault refuse the message
	// with "550 5.7.1", a permanent refusal a client must not retry,
	// instead of the transient "451 4.3.0". Nothing is sent either way.
	PermanentRefusal bool
	// Kind names a message's effect kind, for harness.Config.EffectPolicies
	// and reports, from the message as the sink read it: "receipt" for a
	// receipt, "welcome" for a welcome email, so that each has its own
	// policy. Nil, or "" from it, is KindEmail.
	Kind func(SMTPMessage) string
}

// Log is the effect log of one scenario (or one clean reference run): the
// effects every delivery made, in the order the providers accepted them,
// and the providers' memory that outlives a delivery, such as the payment
// provider's idempotency keys, since the providers are systems outside
// the worker. The harness makes one per scenario and gives each delivery
// its Clients; its methods are safe for concurrent use.
type Log struct {
	now func() time.Time

	mu      sync.Mutex
	closed  bool // Close was called
	entries []assert.Effect
	broken  firstErr // the harness could not record an effect: the run is void

	payments *paymentStore
	smtp     smtpSinks // the deliveries' SMTP servers, see smtp.go

	// HTTP providers (http.go): started by the first HTTPClient, ended by
	// Close.
	httpCfg  HTTPProviders
	smtpCfg  SMTPProvider
	httpOnce sync.Once
	http     *httpSink
	httpErr  error
}

// NewLog returns an empty log whose providers read the time from now (the
// harness clock) and are set up by p. It fails when p holds a setting no
// provider can have, naming it.
func NewLog(now func() time.Time, p Providers) (*Log, error) {
	if now == nil {
		return nil, fmt.Errorf("effects.NewLog without a clock")
	}
	if err := p.Payments.check(); err != nil {
		return nil, err
	}
	if err := p.HTTP.check(); err != nil {
		return nil, err
	}
	return &Log{now: now, payments: p.Payments.store(), httpCfg: p.HTTP, smtpCfg: p.SMTP}, nil
}

// Close ends what the providers started for the scenario: the listener
// behind the deliveries' HTTP clients and its connections, and the
// deliveries' SMTP sinks (Clients.SMTPAddr), whose open sessions are
// cut. The log stays readable. The harness calls it once the scenario's
// deliveries are over.
func (l *Log) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	router.closed(l) // route.go
	l.smtp.close()
	var started bool
	l.httpOnce.Do(func() {}) // no HTTP client can start the listener from now on
	l.mu.Lock()
	started = l.http != nil
	l.mu.Unlock()
	if !started {
		return nil
	}
	return l.http.close()
}

func (l *Log) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// httpSink starts the scenario's HTTP providers on first use.
func (l *Log) httpSink() (*httpSink, error) {
	l.httpOnce.Do(func() {
		s, err := startHTTP(l, l.httpCfg)
		l.mu.Lock()
		l.http, l.httpErr = s, err
		l.mu.Unlock()
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.http == nil && l.httpErr == nil {
		return nil, blame.Userf("Delivery.HTTPClient: the scenario is over, its HTTP providers are closed; make HTTP calls only while the handler runs")
	}
	return l.http, l.httpErr
}

// Clients returns the providers' clients of one delivery. label is the
// delivery as results print it ("j1a2w2"), jobID and attempt are its
// queue's; each effect is recorded with them. steps makes every call a
// step of the delivery's schedule.
func (l *Log) Clients(label, jobID string, attempt int, steps Steps) *Clients {
	return &Clients{log: l, label: label, jobID: jobID, attempt: attempt, steps: steps}
}

// Effects returns the log so far.
func (l *Log) Effects() []assert.Effect {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

// Err is why the log is void, or nil: an effect a handler made could not
// be recorded (its payload could not be encoded), so no comparison of
// this run means anything.
func (l *Log) Err() error { return l.broken.get() }

func (l *Log) fail(err error) { l.broken.set(err) }

// firstErr is the first error set on it; safe for concurrent use.
type firstErr struct {
	mu  sync.Mutex
	err error
}

func (f *firstErr) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *firstErr) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (l *Log) record(e assert.Effect) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, e)
}

// Clients are one delivery's clients of its scenario's providers: what
// harness.Delivery.Mail, Payments and Effect hand the handler. A nil
// *Clients (a Delivery the harness did not make) answers every call with
// an error saying so.
type Clients struct {
	log     *Log
	label   string
	jobID   string
	attempt int
	steps   Steps

	httpOnce sync.Once // http.go: the delivery's side of the HTTP providers
	web      *httpDelivery
}

// Mail returns the delivery's mail sender. Its emails go to the
// scenario's effect log, where the oracle compares them with one clean
// run's.
func (c *Clients) Mail() *Mailer { return &Mailer{c: c} }

// Payments returns the delivery's payment provider. Its payments go to
// the scenario's effect log, where the oracle compares them with one
// clean run's.
func (c *Clients) Payments() *Payments { return &Payments{c: c} }

// call runs one effect as a step of the delivery and records it once the
// provider has answered. do returns what the provider answered: a result
// worth keeping, whether it replayed a stored answer, and the error. The
// Reply the schedule gives the call decides what the handler hears: a
// refused call never reaches do, and a call whose answer is lost runs do,
// is recorded as made, and returns a timeout to the handler.
func (c *Clients) call(ctx context.Context, e assert.Effect, do func() (result string, replayed bool, err error)) error {
	return c.callStep(ctx, e, faults.Step{}, do)
}

// callStep is call with what the step says of the call beside the effect:
// whether it is an HTTP request and its client waits with a deadline
// (faults.Step.HTTP, faults.Step.Deadline).
func (c *Clients) callStep(ctx context.Context, e assert.Effect, via faults.Step, do func() (result string, replayed bool, err error)) error {
	call := faults.Step{SQL: e.String(), Effect: e.Kind, Key: e.Key, HTTP: via.HTTP, Deadline: via.Deadline}
	reply, err := c.steps.Begin(ctx, call)
	if err != nil {
		return err
	}
	defer c.steps.End(call)
	if reply == Refused {
		err = &CallError{Kind: e.Kind}
	} else {
		var result string
		var replayed bool
		result, replayed, err = do()
		e.Result, e.Replayed = result, replayed
	}
	if err != nil {
		e.Err = err.Error()
	}
	if reply == ReplyLost || reply == AnsweredLate {
		e.ReplyLost = true
		err = &CallError{Kind: e.Kind, Applied: true, Late: reply == AnsweredLate}
	}
	e.Delivery, e.JobID, e.Attempt = c.label, c.jobID, c.attempt
	e.At = c.log.now()
	c.log.record(e)
	return err
}

// errNoFakes is what a client answers on a Delivery the harness did not
// make.
func errNoFakes(method string) error {
	return blame.Userf("%s: this Delivery was not made by the harness, so it has no effect fakes; use the *Delivery the harness passes to the handler", method)
}
