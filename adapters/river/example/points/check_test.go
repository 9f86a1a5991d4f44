package points_test

import (
	"testing"

	"github.com/riverqueue/river"

	twiceriver "github.com/runtwice/twice/adapters/river"
	"github.com/runtwice/twice/adapters/river/example/points"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// The checks a team would write: each worker as it is deployed, under the
// default matrix. They fail the test when the worker is not idempotent,
// and `twice report ./adapters/river/example/...` reports them.

var schema = harness.Config{Setup: []harness.Setup{harness.SQL(points.Schema)}}

// Inserted unique by its args, the reward job's producer copy is refused
// by River, and its transaction completes the job: idempotent.
func TestRewardWorker(t *testing.T) {
	harness.Check(t, twiceriver.Job("reward-order", points.RewardArgs{OrderID: 9812},
		func(d *harness.Delivery) river.Worker[points.RewardArgs] { return &points.RewardWorker{Pool: d.DB} },
		twiceriver.InsertOpts(&river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}})), schema)
}

// The ledger line is written in autocommit and completed by River's
// completer: a crash between the two writes it twice.
func TestLedgerWorker(t *testing.T) {
	c := schema
	c.ExpectFinding = "the ledger line is written again when the worker dies before River's completer runs"
	c.ExpectPattern = result.InsertWithoutKey
	harness.Check(t, twiceriver.Job("ledger-order", points.LedgerArgs{OrderID: 9812},
		func(d *harness.Delivery) river.Worker[points.LedgerArgs] { return &points.LedgerWorker{Pool: d.DB} },
		twiceriver.InsertOpts(&river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}})), c)
}

// The shipping job inserts its notification unique by args: a producer's
// second copy ships again but does not notify again.
func TestShipWorker(t *testing.T) {
	harness.Check(t, twiceriver.Job("ship-order", points.ShipArgs{OrderID: 9812},
		func(d *harness.Delivery) river.Worker[points.ShipArgs] {
			return &points.ShipWorker{Pool: d.DB, Unique: true}
		}),
		schema)
}
