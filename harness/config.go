package harness

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/render"
)

// Config says how to check a job. The zero value runs faults.Default on an
// empty database.
type Config struct {
	// Setup builds the schema and fixtures every scenario starts from,
	// applied in order.
	Setup []Setup
	// SetupTimeout bounds each setup step (one SQL text, migration file or
	// Func); zero means 2 minutes. A step still running then fails, naming
	// itself and what its database sessions were doing or waiting on; its
	// context is cancelled, and a Func that ignores that is abandoned.
	SetupTimeout time.Duration
	// Faults to run; nil runs faults.Default(). The default matrix minus
	// some faults is faults.DefaultWithout(faults.NameVisibilityTimeout);
	// a fault tuned, such as a later redrive or more interleavings, is
	// one built by its constructor (faults.Redrive(7*24*time.Hour),
	// faults.ConcurrentDelivery(faults.MaxInterleavings(100))). A fault
	// whose constructor refused its argument fails the check at once,
	// before any server starts. Explore draws its own schedules and
	// refuses Faults: bound what it draws with ExploreOptions.
	Faults []faults.Fault
	// IgnoreTables leaves tables out of the comparison.
	IgnoreTables []string
	// IgnoreColumns leaves columns out: "table.column", or "column" for
	// every table. "table.column.key.sub" leaves out one value inside a
	// json/jsonb column (array elements by index, "orders.meta.items.0")
	// and compares the rest of the document.
	IgnoreColumns []string
	// CmpOptions are passed to go-cmp when rows are compared.
	CmpOptions []cmp.Option
	// SequenceColumns are "table.column"s whose values come from a
	// sequence in a way the catalog does not show: an explicit nextval in
	// the INSERT, or a number inside text ('X-' || nextval('doc_seq')).
	// They compare by rank, as serial and identity columns do (the
	// smallest value is #1; numbers inside text in numeric order), and so
	// do foreign keys pointing at them, because an attempt that rolled
	// back burnt sequence values and a correct job's redelivery draws
	// "X-2" where the clean run drew "X-1". Without it such a difference
	// is a finding, and the finding names the column and the sequence
	// the scenario advanced. Each must name a column of a clean run's
	// database.
	SequenceColumns []string
	// ExpectFinding marks a job known not to be idempotent, with the
	// reason. Check then passes while twice still finds the problem and
	// fails once the job has become idempotent, so demos and known issues
	// do not fail a suite and fixed ones are noticed.
	ExpectFinding string
	// ExpectPattern is, with ExpectFinding, the pattern the finding must
	// show (result.IncrementWithoutRecord, ...): a culprit of a failing
	// scenario has it. A finding that does not show it fails the check,
	// naming the patterns it does show, so a demo documents how the job
	// fails, not only that it does.
	ExpectPattern result.Pattern
	// ExpectNoWork marks a job that rightly writes nothing and makes no
	// effect on this fixture, with the reason. Without it such a job is
	// refused: a check whose clean run wrote no row (committed, as the
	// database's write history counts them) and made no effect proves
	// nothing, since every fault leaves the same nothing behind (a
	// fixture that lacks the row the job updates, a handler that works
	// through a pool of its own). With it, the check fails once the job
	// does write or make an effect.
	ExpectNoWork string
	// AcceptWarnings lists the warnings this check accepts. A check that
	// passes with a warning meaning that its pass may be wrong fails
	// instead, naming the warning and the line that accepts it:
	// result.NoStepTaken (a delivery on a fresh worker did its work, if
	// any, where the harness cannot see it, or skipped it on what it
	// kept in memory), result.GoroutineOutlived (a goroutine the
	// handler started ran on past the harness's watch),
	// result.TransactionLeftOpen (a handler returned in a transaction, or
	// closed a connection inside one: work it believes it did rolled
	// back) and result.CleanRunsDisagree (the two clean runs did
	// different work, so what differed was left out of every
	// comparison). result.ConnectionLeftOpen is logged, and accepting it
	// changes nothing.
	AcceptWarnings []result.WarningKind
	// DeliveryTimeout bounds each delivery; zero means 30s. A handler that
	// has not returned by then fails its delivery, and the message names
	// the step it was at.
	DeliveryTimeout time.Duration
	// ProducerRetriesWithin is the latest the job's producer retries an
	// enqueue, counted from its first (its client's timeouts and retry
	// budget); zero means it may retry at any time. A producer whose
	// retries all fall inside the queue's dedup window (a JetStream
	// stream's Duplicates, asynq's Unique TTL) never makes the copy
	// faults.ProducerRetryAfterDedup tries, so that fault has no
	// scenario then. Copies from elsewhere (an outbox relay, a webhook
	// sender's retry) are faults.ProducerCopyAt's, which it does not
	// bound.
	ProducerRetriesWithin time.Duration
	// ProducerTimeout is how long the job's producer waits for the
	// queue's answer to an enqueue before it retries; zero means 5s
	// (faults.DefaultProducerTimeout). The late-producer-retry copy
	// reaches the queue that long after the original (no later than
	// ProducerRetriesWithin), at that time on the harness clock, so a
	// producer that stamps its arguments with the time gives the copy
	// other arguments, as in production.
	ProducerTimeout time.Duration
	// StepTimes say how long the job's steps take on the harness clock:
	// its SMTP call, its call to a payments API, a slow statement (see
	// faults.StepTime); a step none matches takes no time. With them
	// the visibility-timeout fault pauses the first delivery only at
	// the step it is in when the queue gives up on it (AckWait,
	// BackOff[0], a visibility timeout), and not at all when it has
	// returned by then: an SMTP call of 2s overlaps a 1s BackOff, one
	// of 20ms does not. Without them the job's timing is unknown and
	// every step is a pause point. Delivery.Now does not move with
	// them.
	StepTimes []faults.StepTime
	// EffectPolicies says, per effect kind ("email", "payment", or a kind
	// given to Delivery.Effect), how often the effect may happen; a kind
	// not named is exactly-once.
	EffectPolicies map[string]assert.Policy
	// IgnoreEffectFields leaves payload fields out of the effect
	// comparison: "kind.field", or "field" for every kind.
	// "kind.field.key.sub" leaves out one value inside a field holding an
	// object or array and compares the rest.
	IgnoreEffectFields []string
	// Providers sets up the effect providers every scenario gets afresh,
	// such as how long the payment provider remembers an idempotency key
	// (effects.PaymentProvider.KeyWindow, 24h); the zero value is each
	// provider's default.
	Providers effects.Providers
	// ClockStart is the harness clock's time when every scenario, and
	// each clean reference run, starts; zero means 2026-01-01T09:00:00Z.
	// The clock does not follow the wall clock: only faults move it (the
	// visibility timeout before a redelivery, faults.Redrive's after
	// before a redrive), so timestamps from Delivery.Now compare exactly with the
	// clean run and a timestamp a redelivery moves is a finding. When the
	// first deliveries died before committing anything or making an
	// effect, the job counts as run from the next delivery's start, and
	// the scenario is compared with a clean run started as late; a job
	// without a queue adapter whose clean runs never read the clock
	// (Delivery.Now, an effect provider) would run the same then, and
	// is compared with its first clean run instead.
	ClockStart time.Time

	// rerunNone is set under twice report -rerun-failed for a check none
	// of whose schedules failed in the report it names: the check runs
	// its clean references only.
	rerunNone string
}

func (c Config) clockStart() time.Time {
	if c.ClockStart.IsZero() {
		return defaultClockStart
	}
	return c.ClockStart
}

func (c Config) deliveryTimeout() time.Duration {
	if c.DeliveryTimeout > 0 {
		return c.DeliveryTimeout
	}
	return 30 * time.Second
}

func (c Config) faults() []faults.Fault {
	if c.Faults != nil {
		return c.Faults
	}
	return faults.Default()
}

// doubtful names, by their Go names, the warnings that say a pass may be
// wrong: a delivery worked where the harness cannot see, skipped its
// work on memory production would not have, left work running past the
// watch, or believes it did work that rolled back (a transaction left
// open), or the clean runs it was compared with did different work, so
// what differed was compared nowhere. ConnectionLeftOpen is not one: the
// harness closed the connection, and what it committed was compared.
var doubtful = map[result.WarningKind]string{
	result.NoStepTaken:         "NoStepTaken",
	result.GoroutineOutlived:   "GoroutineOutlived",
	result.TransactionLeftOpen: "TransactionLeftOpen",
	result.CleanRunsDisagree:   "CleanRunsDisagree",
}

// warningKinds are the warnings a check can raise, which AcceptWarnings
// may name.
var warningKinds = []result.WarningKind{result.TransactionLeftOpen, result.NoStepTaken, result.CleanRunsDisagree, result.ConnectionLeftOpen, result.GoroutineOutlived}

// unbacked refuses a pass that a doubtful warning says may be wrong,
// unless the check accepts it (Config.AcceptWarnings): a warning that
// plain go test never shows must not leave a green check behind it.
func unbacked(res *Result, accept []result.WarningKind) error {
	if !res.Idempotent() {
		return nil // the finding is the verdict
	}
	var why []string
	for _, w := range res.Warnings {
		name, doubt := doubtful[w.Kind]
		if !doubt || slices.Contains(accept, w.Kind) {
			continue
		}
		line := render.Warning(res.Job, w)
		if w.Kind == result.NoStepTaken {
			line += ". If it skipped its work on what it kept in memory (a dedup map in Job.Handler's closure, which every delivery shares), production would have rebuilt that memory after a crash: use Job.NewWorker to build the handler per worker, or keep the record in the database"
		}
		why = append(why, fmt.Sprintf("%s.\nThis pass may be wrong, so the check fails; if that is expected here, accept it: Config.AcceptWarnings: []result.WarningKind{result.%s}", line, name))
	}
	if len(why) == 0 {
		return nil
	}
	return blame.User(errors.New(strings.Join(why, "\n")))
}
