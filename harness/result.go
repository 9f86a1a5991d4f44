package harness

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/internal/freshdb"
)

// Verdict is a scenario's outcome.
type Verdict string

// Verdicts.
const (
	// Idempotent: the scenario ended in the reference state and the job
	// completed.
	Idempotent Verdict = "idempotent"
	// NotIdempotent: the state differs from the reference, or the job
	// could not complete.
	NotIdempotent Verdict = "not-idempotent"
)

// Result is everything Run learned about a job. It is plain data, so a
// runner can serialise it.
type Result struct {
	// Job is the job's name.
	Job string
	// Reference is the state after one clean delivery.
	Reference *assert.Snapshot
	// Volatile lists the "table.column"s that differed between two clean
	// reference runs (now(), random UUIDs), and inside json/jsonb columns
	// only the differing paths, "table.column.key.sub"; they are left out
	// of every comparison.
	Volatile []string
	// ReferenceEffects are the effects of one clean delivery.
	ReferenceEffects []assert.Effect
	// VolatileEffects are effect payload fields ("kind.field", or a path
	// inside one, "kind.field.key") that differed between the two clean
	// runs, left out of every comparison.
	VolatileEffects []string
	// Steps are the SQL of the steps one clean delivery took: the fault
	// points.
	Steps []string
	// Scenarios holds one entry per executed schedule, in order.
	Scenarios []Scenario
	// ExpectFinding is Config.ExpectFinding: the reason the job is known
	// not to be idempotent, or empty.
	ExpectFinding string
	// Duration is the wall time of the whole run.
	Duration time.Duration

	kept []kept
	// stragglers notes handler goroutines still running when the check
	// ended (linger.go); Check and Explore log it.
	stragglers string
}

// kept is a failed scenario's database, held until the test's end decides
// whether it is evidence.
type kept struct {
	scenario int // index into Scenarios
	db       *freshdb.Database
}

// Scenario is one schedule executed on one fresh database.
type Scenario struct {
	// Fault is the name of the fault the schedule came from.
	Fault string
	// Schedule is the schedule in its short text form (faults.Parse).
	Schedule string
	// Verdict is the outcome.
	Verdict Verdict
	// Problems says, one line each, why the verdict is NotIdempotent:
	// a delivery that could not complete the job, a state mismatch.
	Problems []string
	// StateDiff holds the tables whose rows differ from the reference.
	StateDiff []assert.TableDiff
	// Effects are the effects the scenario's deliveries made, in order.
	Effects []assert.Effect
	// EffectDiff is how Effects break their policies against the
	// reference's, or nil.
	EffectDiff *assert.EffectDiff
	// Deliveries are the deliveries as they ran, in start order.
	Deliveries []DeliveryOutcome
	// Order is the interleaving as it happened: for each granted step, the
	// number of its delivery, "1,2,2,1".
	Order string
	// LockWaits counts granted steps that waited on a lock another
	// delivery held; the executor ran the other delivery meanwhile.
	LockWaits int
	// Database is the connection string of the scenario's database when
	// it was kept as evidence (the first failed scenario's), otherwise
	// empty. It carries no password (it is printed and stored in
	// reports): psql asks for it, or reads PGPASSWORD.
	Database string
	// Duration is the wall time of fresh state, deliveries, snapshot and
	// diff.
	Duration time.Duration
}

// DeliveryOutcome is what one delivery did.
type DeliveryOutcome struct {
	// Delivery is the delivery in the schedule's text form: "j1a2w2".
	Delivery string
	// JobID and Attempt are what the handler was given; Worker numbers
	// the worker that ran it.
	JobID   string
	Attempt int
	Worker  int
	// Fault says what went wrong by design: "crashed before step 3 reached
	// the server: INSERT ...", "returned nil, but its ack was lost".
	Fault string
	// Err is the error the handler returned, or empty. A delivery that
	// crashed has none: its return value is ignored.
	Err string
	// Steps are the SQL of the steps the delivery completed, in order
	// ("effect: ..." for effect calls); a redelivery that found the job
	// done takes fewer than the clean run.
	Steps []string
	// QueueRetry marks the clean redelivery the queue made because the
	// job's last scheduled delivery failed.
	QueueRetry bool
	// Duration is the handler's wall time, up to its death if it died.
	Duration time.Duration
}

// Idempotent reports whether every scenario was idempotent.
func (r *Result) Idempotent() bool {
	for _, s := range r.Scenarios {
		if s.Verdict != Idempotent {
			return false
		}
	}
	return true
}

// Failed returns the scenarios that were not idempotent.
func (r *Result) Failed() []Scenario {
	var out []Scenario
	for _, s := range r.Scenarios {
		if s.Verdict != Idempotent {
			out = append(out, s)
		}
	}
	return out
}

// DropDatabases drops the databases Run kept as evidence of failed
// scenarios. Check does it for you when the test passes.
func (r *Result) DropDatabases(ctx context.Context) error {
	var errs []error
	for _, k := range r.kept {
		errs = append(errs, k.db.Drop(ctx))
	}
	r.kept = nil
	return errors.Join(errs...)
}

// keepDatabases makes the failed scenarios' databases outlive the run and
// says, one line each, how to connect to them.
func (r *Result) keepDatabases(ctx context.Context) []string {
	var lines []string
	for _, k := range r.kept {
		s := &r.Scenarios[k.scenario]
		if err := k.db.Keep(ctx); err != nil {
			lines = append(lines, fmt.Sprintf("internal: keeping the database of %s (%s): %v", s.Fault, s.Schedule, err))
			continue
		}
		s.Database = k.db.DisplayConnString()
		lines = append(lines, fmt.Sprintf("kept the database of %s (%s) as evidence: psql %q", s.Fault, s.Schedule, s.Database))
	}
	r.kept = nil
	return lines
}
