package loyalty_test

import (
	"testing"

	"github.com/vgarvardt/gue/v5"

	twicegue "github.com/runtwice/twice/adapters/gue"
	"github.com/runtwice/twice/adapters/gue/example/loyalty"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// The checks a team would write: each WorkFunc as it is deployed, under
// the default matrix. They fail the test when the WorkFunc is not
// idempotent, and `twice report ./adapters/gue/example/...` reports them.

var schema = harness.Config{Setup: []harness.Setup{harness.SQL(loyalty.Schema)}}

// The award is written in j.Tx(), which gue commits with the job's
// deletion: idempotent under every fault.
func TestReward(t *testing.T) {
	harness.Check(t, twicegue.Job("reward-order",
		twicegue.Spec[loyalty.RewardArgs]{Type: loyalty.RewardType, Args: loyalty.RewardArgs{OrderID: 9812}},
		func(d *harness.Delivery) gue.WorkFunc { return loyalty.Reward }),
		schema)
}

// The ledger line is written on the WorkFunc's own pool: a crash before
// gue's COMMIT writes it twice.
func TestLedger(t *testing.T) {
	c := schema
	c.ExpectFinding = "the ledger line commits on its own connection before gue's transaction deletes the job"
	c.ExpectPattern = result.InsertWithoutKey
	harness.Check(t, twicegue.Job("ledger-order",
		twicegue.Spec[loyalty.RewardArgs]{Type: loyalty.LedgerType, Args: loyalty.RewardArgs{OrderID: 9812}},
		func(d *harness.Delivery) gue.WorkFunc { return loyalty.Ledger{Pool: d.DB}.Work }),
		c)
}
