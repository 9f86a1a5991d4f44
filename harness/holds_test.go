package harness_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// withNotes gives a check the notes table the tests of holds write.
func withNotes(c *harness.Config) {
	c.Setup = []harness.Setup{harness.SQL(`CREATE TABLE notes (note text PRIMARY KEY)`)}
}

// A held place whose statement cannot run in a transaction block runs as
// it is, and the scenario's delivery says so; so does one on a statement
// inside a transaction, whose COMMIT is what commits it.
func TestUnholdableStatementIsNamed(t *testing.T) {
	job := harness.Job{Name: "vacuum-then-insert", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if _, err := d.DB.Exec(ctx, `VACUUM notes`); err != nil {
			return err
		}
		tx, err := d.DB.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `INSERT INTO notes VALUES ('x') ON CONFLICT DO NOTHING`); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}}
	tests := []struct{ schedule, unheld string }{
		{"j1a1w1 > j1a2w2@1:0 order 1~,2", "step 1 ran as it is (VACUUM notes): VACUUM cannot run inside a transaction block"},
		{"j1a1w1 > j1a2w2@1:0 order 1,1,1~,2", "step 3 ran as it is (INSERT INTO notes VALUES ('x') ON CONFLICT DO NOTHING): it runs inside a transaction block, whose COMMIT is what commits it"},
	}
	for _, tt := range tests {
		t.Run(tt.schedule, func(t *testing.T) {
			sc := replay(t, job, tt.schedule, withNotes).Scenarios[0]
			assert.Equal(t, tt.unheld, sc.Deliveries[0].Unheld)
			assert.Empty(t, sc.Deliveries[1].Unheld)
			assert.Equal(t, result.Idempotent, sc.Verdict)
		})
	}
}

// A held statement whose partner never comes (the other delivery has
// ended) commits anyway, and the scenario completes; replayed, a held
// schedule ends as it did.
func TestHoldWithNothingBeside(t *testing.T) {
	job := harness.Job{Name: "two-inserts", Handler: func(ctx context.Context, d *harness.Delivery) error {
		for _, n := range []string{"a", "b"} {
			if _, err := d.DB.Exec(ctx, `INSERT INTO notes VALUES ($1) ON CONFLICT DO NOTHING`, n+d.JobID); err != nil {
				return err
			}
		}
		return nil
	}}
	// Delivery 2 runs whole before delivery 1's second insert, held.
	sc := replay(t, job, "j1a1w1 > j2a1w2@1:0 order 1,2,2,1~", withNotes).Scenarios[0]
	for _, d := range sc.Deliveries {
		assert.Empty(t, d.Err)
		assert.Len(t, d.Steps, 2)
		for _, st := range d.Steps {
			assert.True(t, st.Autocommit && st.CommitPoint, "%s: an autocommit write", st.SQL)
		}
	}
	assert.Equal(t, []result.Fate{result.Ran, result.CommitHeld}, fates(sc.Deliveries[0]), "delivery 1's second insert ran with its commit held")
	assert.Equal(t, []result.Fate{result.Ran, result.Ran}, fates(sc.Deliveries[1]))
	assert.True(t, strings.HasSuffix(sc.Schedule.String(), "order 1,2,2,1~"), sc.Schedule.String())
}

// A held commit waits for the next step beside it; when that one is an
// ambiguous statement that waits on the held one's lock (its reply can
// only come after the commit), the hold is released as for any lock
// wait, and the correct job stays correct.
func TestHoldBesideALostReply(t *testing.T) {
	job := harness.Job{Name: "ledger", Handler: func(ctx context.Context, d *harness.Delivery) error {
		_, err := d.DB.Exec(ctx, `INSERT INTO notes VALUES ('once') ON CONFLICT DO NOTHING`)
		return err
	}}
	sc := replay(t, job, "j1a1w1!ambiguous:1 > j2a1w2@1:0 order 2~,1", withNotes).Scenarios[0]
	assert.Equal(t, result.Idempotent, sc.Verdict, "%+v", sc.Deliveries)
	assert.Empty(t, sc.Deliveries[1].Err, "the held delivery")
}

// The same, the other way round: the ambiguous statement is granted
// first, but reaches the lock after the held statement, granted next,
// has taken it (here it sleeps first). No step is granted after the
// hold, the ambiguous one's delivery waits for its reply, and the hold
// must still be released rather than wait for the delivery timeout.
func TestLostReplyReachesTheHeldLockLate(t *testing.T) {
	job := harness.Job{Name: "slow-first", Handler: func(ctx context.Context, d *harness.Delivery) error {
		_, err := d.DB.Exec(ctx, `INSERT INTO notes SELECT 'once' FROM pg_sleep(CASE WHEN $1::int = 2 THEN 0.3 ELSE 0 END) ON CONFLICT DO NOTHING`, d.Attempt)
		return err
	}}
	sc := replay(t, job, "j1a1w1 > j1a2w2@1:0!ambiguous:1 order 2,1~", withNotes, func(c *harness.Config) {
		c.DeliveryTimeout = 10 * time.Second
	}).Scenarios[0]
	assert.Equal(t, []result.Fate{result.ReplyLost}, fates(sc.Deliveries[1]), "%+v", sc.Deliveries)
	assert.Equal(t, []result.Fate{result.CommitHeld}, fates(sc.Deliveries[0]), "%+v", sc.Deliveries)
	for _, d := range sc.Deliveries {
		assert.NotContains(t, d.Err, "did not return", "attempt %d", d.Attempt)
	}
	assert.Equal(t, result.Idempotent, sc.Verdict, "%+v", sc.Deliveries)
}
