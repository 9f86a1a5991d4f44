package harness_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
)

// The seed's ledger behind a plpgsql function, so the whole credit is one
// autocommit SELECT whose text writes nothing.
const creditFunctionSchema = `
CREATE TABLE customers (id bigint PRIMARY KEY, email text NOT NULL, points int NOT NULL);
CREATE TABLE points_ledger (
  order_id bigint NOT NULL,
  reason   text   NOT NULL,
  points   int    NOT NULL,
  UNIQUE (order_id, reason)
);
INSERT INTO customers VALUES (77, 'asha@example.com', 120);
CREATE FUNCTION credit_order(p_customer bigint, p_order bigint) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO points_ledger VALUES (p_order, 'order_reward', 50) ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  UPDATE customers SET points = points + 50 WHERE id = p_customer;
  RETURN true;
END $$;
`

// rewardThroughFunction credits the order once, through the function, and
// tells the customer when it believes the credit failed: written as a job
// package would be, and wrong in the same way as examples/creditnotice.
func rewardThroughFunction(ctx context.Context, d *harness.Delivery) error {
	var credited bool
	err := d.DB.QueryRow(ctx, `SELECT credit_order($1, $2)`, 77, 9812).Scan(&credited)
	if err != nil {
		_ = d.Mail().Send(ctx, effects.Email{
			To:      "asha@example.com",
			Subject: "We could not credit your points",
			Body:    "Order 9812: we will try again.",
		})
	}
	return err
}

// Only the ambiguous commit of the SELECT finds it: the function's writes
// committed, the reply was lost, and the customer got the points and an
// email saying they did not. Were commit points read from the SQL text,
// the SELECT would be none and the job would pass.
func TestFunctionCallWithNoticeOnError(t *testing.T) {
	res := harness.Check(t, harness.Job{Name: "reward-through-function", Handler: rewardThroughFunction}, harness.Config{
		Setup:         []harness.Setup{harness.SQL(creditFunctionSchema)},
		ExpectFinding: "an ambiguous commit of SELECT credit_order(...) sends a false 'could not credit' email",
	})
	require.NotNil(t, res)
	assert.Equal(t, []faults.Step{{SQL: "SELECT credit_order($1, $2)", CommitPoint: true, Autocommit: true}}, res.Steps)
	ambiguous := 0
	for _, s := range res.Scenarios {
		want := result.Idempotent
		if s.Fault == faults.NameAmbiguousCommit {
			want = result.NotIdempotent
			ambiguous++
			if len(s.StateDiff) != 0 || s.EffectDiff == nil || s.EffectDiff.Extra != 1 {
				t.Errorf("ambiguous commit: want the state of one clean run and one extra email, got state %v effects %v", s.StateDiff, s.EffectDiff)
			}
		}
		if s.Verdict != want {
			t.Errorf("scenario %s (%s) = %s, want %s", s.Fault, s.Schedule, s.Verdict, want)
		}
	}
	assert.Equal(t, 1, ambiguous, "one ambiguous-commit scenario, at the SELECT")
}
