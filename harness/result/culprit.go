package result

import "github.com/runtwice/twice/faults"

// Culprit is one row write a scenario made past what one clean run makes,
// in a table that differs: who wrote it, with which statement, what it
// changed, and the pattern it shows. The write history (harness's doc)
// records every row a committed statement wrote with the statement that
// wrote it; the scenario's writes of a table by one statement beyond the
// clean run's count of them are the culprits, in the order written.
type Culprit struct {
	// Delivery is the delivery whose step wrote the row; its label
	// ("j1a2w2") names the job, attempt and worker.
	Delivery faults.Delivery
	// Step is the delivery's step number (DeliveryOutcome.Steps[Step-1]),
	// or 0 when the write matched no step the harness granted.
	Step int `json:",omitempty"`
	// SQL is the client statement that wrote the row (a trigger's or a
	// function's write is its statement's).
	SQL string
	// Table and Row are the row: its table and its primary key (empty
	// when the table has none).
	Table string
	Row   string `json:",omitempty"`
	// Op is what the write did: "insert", "update" or "delete".
	Op string
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
	// so the copy's record does not find the first's.
	KeyPerEnqueue Pattern = "key-per-enqueue"
)
