package result

import (
	"fmt"
	"slices"

	"github.com/runtwice/twice/faults"
)

// Culprit is one row write a scenario made past what one clean run makes,
// in a table that differs: who wrote it, with which statement, what it
// changed, and the pattern it shows. The write history (harness's doc)
// records every row a committed statement wrote with the statement that
// wrote it; the scenario's writes of a table by one statement beyond the
// clean run's count of them are the culprits, in the order written.
type Culprit struct {
	// Delivery is the delivery whose step wrote the row; its label
	// ("j1a2w2") names the job, attempt and worker.
	Delivery faults.Scheduled
	// Step is the delivery's step number (DeliveryOutcome.Steps[Step-1]),
	// or 0 when the write matched no step the harness granted.
	Step int `json:",omitempty"`
	// SQL is the client statement that wrote the row (a trigger's or a
	// function's write is its statement's).
	SQL string `json:",omitempty"`
	// Table and Row are the row: its table and its primary key (empty
	// when the table has none).
	Table string `json:",omitempty"`
	Row   string `json:",omitempty"`
	// Op is what the write did: "insert", "update" or "delete"; "missing
	// insert" (update, delete) for a write of the clean run the scenario
	// never made, named by the clean run's statement and row; for an
	// effect, "extra" (made beyond the clean run's) or "missing" (the
	// clean run's, which the scenario lacks).
	Op string
	// Effect is the effect, as it prints ("email to=a@b subject=..."),
	// when the culprit is an effect rather than a row; SQL is then empty.
	Effect string `json:",omitempty"`
	// Changes are the columns an update changed, with their values.
	Changes []Change `json:",omitempty"`
	// Pattern is what the write shows, decided from the history; empty
	// when none is recognised.
	Pattern Pattern `json:",omitempty"`
}

// Change is one column a write changed: its values before and after, as
// JSON.
type Change struct {
	Column, Before, After string
}

// Pattern names a way a job fails to be idempotent, in the terms of
// twice's lesson, with the fix it calls for (render.Pattern).
type Pattern string

// Patterns a culprit can show.
const (
	// IncrementWithoutRecord: a retry applied the same increment again
	// (points = points + 50), as the clean run's write of the row did,
	// because nothing records that it was applied.
	IncrementWithoutRecord Pattern = "increment-without-record"
	// InsertWithoutKey: a retry inserted a row the clean run inserts once,
	// because nothing unique stops a second.
	InsertWithoutKey Pattern = "insert-without-unique-key"
	// KeyPerEnqueue: the row is keyed by the queue's job ID, which a
	// producer's retry (a copy of the job, enqueued again) does not share,
	// so the copy's record does not find the first's; or the copy called
	// a provider with another idempotency key than the first's.
	KeyPerEnqueue Pattern = "key-per-enqueue"
	// CheckThenAct: deliveries that ran at once each inserted the row
	// after each checked it was not there (SELECT, then INSERT; INSERT
	// ... WHERE NOT EXISTS): a check is no lock.
	CheckThenAct Pattern = "check-then-act"
	// EffectWithoutRecord: a retry made the effect again (an email, a
	// call without an idempotency key): nothing records that it was made.
	EffectWithoutRecord Pattern = "effect-without-record"
	// RetryWithoutKey: the delivery sent a call again after its answer
	// timed out or was lost, with no idempotency key, so the provider,
	// which had made the first, made it twice (a client's own retry of a
	// timed-out POST).
	RetryWithoutKey Pattern = "retry-without-key"
	// KeyPerAttempt: the effect's idempotency key differs between
	// deliveries of one job (drawn per attempt), so the provider cannot
	// tell the retry's call from a new one.
	KeyPerAttempt Pattern = "key-per-attempt"
	// KeyWindowPassed: the retry's call carried the first call's key, but
	// the provider no longer knew it: the retry came after the provider's
	// key window (a redrive days later).
	KeyWindowPassed Pattern = "key-window-passed"
	// EffectLost: an effect of the clean run never happened: a delivery
	// recorded the work as done (or failed) without it, and nothing made it
	// later.
	EffectLost Pattern = "effect-lost"
	// WorkLost: a write of the clean run never happened: a delivery died
	// between two transactions (the record that the work was done, then
	// the work), and the retry trusted the record.
	WorkLost Pattern = "work-lost"
	// DedupWindowPassed: a producer's copy came after the queue had
	// stopped refusing copies (its dedup window, a task ID's retention,
	// a unique job's period ended, or the original completed), so the
	// queue took it as a new job, which did the work again.
	DedupWindowPassed Pattern = "dedup-window-passed"
	// AckBeforeWork: the queue took the job as done (the handler acked,
	// or committed the offset) before the work was written; the worker
	// died in between, and the queue handed the job out no more.
	AckBeforeWork Pattern = "ack-before-work"
	// ResultChanged: a retry rewrote a value the clean run's write of the
	// same row stored, with another value (a status advanced again, an
	// amount or time computed anew): the update computes what it stores
	// from what is there or from the moment.
	ResultChanged Pattern = "result-changed"
)

// patterns are the patterns a culprit can show, for Known.
var patterns = []Pattern{IncrementWithoutRecord, InsertWithoutKey, KeyPerEnqueue, CheckThenAct, EffectWithoutRecord, RetryWithoutKey,
	KeyPerAttempt, KeyWindowPassed, DedupWindowPassed, EffectLost, WorkLost, AckBeforeWork, ResultChanged}

// Known reports whether p is one of the patterns above.
func (p Pattern) Known() bool { return slices.Contains(patterns, p) }

// Severity ranks a finding: an exactly-once effect made twice or lost
// above a changed amount, above another changed value, above a changed
// timestamp alone.
type Severity int

// Severities, least first.
const (
	// SeverityNone: no finding.
	SeverityNone Severity = iota
	// SeverityTime: only timestamps differ.
	SeverityTime
	// SeverityState: stored values differ.
	SeverityState
	// SeverityMoney: a column that holds an amount (amount, cents,
	// balance, points, price, total, credit) differs.
	SeverityMoney
	// SeverityEffect: an exactly-once effect (an email, a payment) was
	// made twice, or an effect was lost.
	SeverityEffect
)

var severityNames = [...]string{"none", "time", "state", "money", "effect"}

func (s Severity) String() string {
	if s < 0 || int(s) >= len(severityNames) {
		return "severity(?)"
	}
	return severityNames[s]
}

// MarshalText writes the severity's name.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a name MarshalText wrote.
func (s *Severity) UnmarshalText(b []byte) error {
	for i, n := range severityNames {
		if n == string(b) {
			*s = Severity(i)
			return nil
		}
	}
	return fmt.Errorf("result: unknown severity %q", b)
}
