package harness_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/recordtb"
)

// A column filled from time.Now() instead of d.Now differs between the two
// clean runs and is left out: that was named only in report.json, so a
// passing check under -v hid that the column was never compared. Every
// pass now names what was left out, with the hint for wall-clock time
// (issue 27).
func TestPassNamesVolatileColumns(t *testing.T) {
	defer harness.SetVerbose(time.Hour)()
	rec := recordtb.New(t)
	job := harness.Job{Name: "stamp", Handler: func(ctx context.Context, d *harness.Delivery) error {
		_, err := d.DB.Exec(ctx, `INSERT INTO stamps (id, at) VALUES (1, $1) ON CONFLICT (id) DO NOTHING`, time.Now())
		return err
	}}
	rec.Run(func(tb testing.TB) {
		harness.Check(tb, job, harness.Config{
			Setup:  []harness.Setup{harness.SQL(`CREATE TABLE stamps (id int PRIMARY KEY, at timestamptz NOT NULL)`)},
			Faults: []faults.Fault{faults.RunTwice()},
		})
	})
	require.Empty(t, rec.Errors())
	var notes []string
	for _, l := range rec.Logs() {
		if strings.Contains(l, "volatile") {
			notes = append(notes, l)
		}
	}
	require.Len(t, notes, 1, "logs %q", rec.Logs())
	assert.Equal(t, `[twice] job "stamp": left out of every comparison as volatile (they differ between two clean runs): stamps.at; stamps.at holds a time: if the handler takes it from time.Now(), use d.Now, so that a time a redelivery moves is compared`, notes[0])
}

// A handler that returns with its transaction open believes it did work
// that rolls back: the check passed without a word. It now warns, naming
// the delivery (issue 27).
func TestTransactionLeftOpenIsWarned(t *testing.T) {
	rec := recordtb.New(t)
	job := harness.Job{Name: "forgot-commit", Handler: func(ctx context.Context, d *harness.Delivery) error {
		tx, err := d.DB.Begin(ctx)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE users SET is_email_verified = true WHERE id = 1`)
		return err // no Commit, no Rollback
	}}
	var res *harness.Result
	rec.Run(func(tb testing.TB) {
		res = harness.Check(tb, job, harness.Config{Setup: []harness.Setup{harness.SQL(usersSchema)}, Faults: []faults.Fault{faults.RunTwice()},
			ExpectNoWork: "its update never commits", AcceptWarnings: []result.WarningKind{result.TransactionLeftOpen}})
	})
	require.NotNil(t, res)
	require.Len(t, res.Warnings, 1, "the warning is a value in the result, which report.json carries")
	w := res.Warnings[0]
	assert.Equal(t, result.TransactionLeftOpen, w.Kind)
	assert.Equal(t, 4, w.Deliveries)
	assert.Equal(t, "j1a1w1", w.First.Label())
	assert.Equal(t, 1, w.Connections)
	var warned []string
	for _, l := range rec.Logs() {
		if strings.HasPrefix(l, "[twice] warning: ") {
			warned = append(warned, l)
		}
	}
	require.Len(t, warned, 1, "logs %q, errors %q", rec.Logs(), rec.Errors())
	assert.Equal(t, `[twice] warning: job "forgot-commit": 4 deliveries returned with a connection still in a transaction or busy, the first delivery j1a1w1 (attempt 1) of schedule j1a1w1 (a clean run) returned with 1 connection still in a transaction or busy; the harness rolled them back. Commit or roll back every transaction before the handler returns (defer tx.Rollback(ctx) after Begin)`, warned[0])
}

// A pass behind which a handler left a transaction open is no pass: the
// work it believes it did there rolled back in every run alike, so no
// scenario differs. It was a log line only -v showed (issue 38); the
// check now fails, with the line that accepts it.
func TestTransactionLeftOpenFailsAPass(t *testing.T) {
	job := harness.Job{Name: "second-tx-open", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if _, err := d.DB.Exec(ctx, `UPDATE users SET is_email_verified = true WHERE id = 1`); err != nil {
			return err
		}
		tx, err := d.DB.Begin(ctx)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO users (id) VALUES (2)`)
		return err // no Commit, no Rollback
	}}
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(usersSchema)}, Faults: []faults.Fault{faults.RunTwice()}}
	rec := recordtb.New(t)
	rec.Run(func(tb testing.TB) { harness.Check(tb, job, cfg) })
	require.Len(t, rec.Errors(), 1, "logs %q", rec.Logs())
	assert.Contains(t, rec.Errors()[0], "returned with 1 connection still in a transaction or busy")
	assert.Contains(t, rec.Errors()[0], "This pass may be wrong, so the check fails; if that is expected here, accept it: Config.AcceptWarnings: []result.WarningKind{result.TransactionLeftOpen}")

	cfg.AcceptWarnings = []result.WarningKind{result.TransactionLeftOpen}
	rec = recordtb.New(t)
	rec.Run(func(tb testing.TB) { harness.Check(tb, job, cfg) })
	assert.Empty(t, rec.Errors(), "accepted, the warning is logged")
}

// AcceptWarnings names warnings of twice's: another string is refused
// before anything runs.
func TestAcceptWarningsNamesWarnings(t *testing.T) {
	_, err := harness.Run(t.Context(), verifyJob, harness.Config{Setup: []harness.Setup{harness.SQL(usersSchema)}, Faults: []faults.Fault{faults.RunTwice()},
		AcceptWarnings: []result.WarningKind{"left-open"}})
	require.Error(t, err)
	assert.True(t, blame.IsUser(err))
	assert.Contains(t, err.Error(), `Config.AcceptWarnings holds "left-open", which is no warning of twice's; the ones a check fails on are result.NoStepTaken, result.GoroutineOutlived, result.TransactionLeftOpen and result.CleanRunsDisagree`)
}

// A connection cut by an ambiguous commit is the fault's, not the
// handler's: no warning about an open transaction.
func TestAmbiguousCommitIsNoTransactionLeftOpen(t *testing.T) {
	rec := recordtb.New(t)
	rec.Run(func(tb testing.TB) {
		harness.Check(tb, verifyJob, harness.Config{Setup: []harness.Setup{harness.SQL(usersSchema)}, Faults: []faults.Fault{faults.AmbiguousCommits()}})
	})
	require.Empty(t, rec.Errors())
	for _, l := range rec.Logs() {
		assert.NotContains(t, l, "warning")
	}
}

// A worker that works through the delivery's pool on its first delivery
// and through one of its own on the next passes unseen: the redelivery
// takes no step, so no fault reaches it and nothing of it is compared.
// The check warns, naming the delivery (issue 27).
func TestDeliveryWithoutStepsIsWarned(t *testing.T) {
	job := harness.Job{Name: "elsewhere", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if d.Attempt > 1 {
			return nil // its work goes through a global pool the harness never sees
		}
		_, err := d.DB.Exec(ctx, `UPDATE users SET is_email_verified = true WHERE id = 1`)
		return err
	}}
	// The pass it would be may be wrong: the check fails by default,
	// where plain go test shows it, with the line that accepts it.
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(usersSchema)}, Faults: []faults.Fault{faults.CrashBeforeAck()}}
	_, err := harness.Run(t.Context(), job, cfg)
	require.Error(t, err)
	assert.True(t, blame.IsUser(err))
	assert.Contains(t, err.Error(), `job "elsewhere": delivery j1a2w2 (attempt 2) of schedule j1a1w1!crash > +30s j1a2w2 (crash-before-ack) returned without a statement`)
	assert.Contains(t, err.Error(), "use Job.NewWorker to build the handler per worker, or keep the record in the database")
	assert.Contains(t, err.Error(), "Config.AcceptWarnings: []result.WarningKind{result.NoStepTaken}")

	cfg.AcceptWarnings = []result.WarningKind{result.NoStepTaken}
	rec := recordtb.New(t)
	var res *harness.Result
	rec.Run(func(tb testing.TB) {
		res = harness.Check(tb, job, cfg)
	})
	require.NotNil(t, res)
	require.Empty(t, rec.Errors(), "the check passes once the warning is accepted")
	require.Len(t, res.Warnings, 1)
	w := res.Warnings[0]
	assert.Equal(t, result.NoStepTaken, w.Kind)
	assert.Equal(t, 2, w.First.Attempt)
	assert.Equal(t, 1, w.CleanSteps)
	var warned []string
	for _, l := range rec.Logs() {
		if strings.HasPrefix(l, "[twice] warning: ") {
			warned = append(warned, l)
		}
	}
	require.Len(t, warned, 1, "logs %q", rec.Logs())
	assert.Contains(t, warned[0], `job "elsewhere": delivery j1a2w2 (attempt 2) of schedule j1a1w1!crash > +30s j1a2w2 (crash-before-ack) returned without a statement through d.DB`)

	// A job that takes its steps in every delivery gets no such warning.
	rec = recordtb.New(t)
	rec.Run(func(tb testing.TB) {
		res = harness.Check(tb, verifyJob, harness.Config{Setup: []harness.Setup{harness.SQL(usersSchema)}, Faults: []faults.Fault{faults.CrashBeforeAck()}})
	})
	require.NotNil(t, res)
	assert.Empty(t, res.Warnings)
}
