package orders_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"

	twicewatermill "github.com/runtwice/twice/adapters/watermill"
	"github.com/runtwice/twice/adapters/watermill/example/orders"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

func sqlHandler(inTx bool) func(*harness.Delivery) message.HandlerFunc {
	return func(d *harness.Delivery) message.HandlerFunc {
		return orders.SQLHandler{DB: d.DB, InSubscriberTx: inTx}.Handle
	}
}

// A producer copy is another message in the topic, which the consumer
// group handles too: left out here.
var sqlFaults = faults.DefaultWithout(faults.ProducerRetry, faults.ConcurrentProducerRetry)

// Written in watermill-sql's transaction, the points commit with the
// consumer group's offset: every fault leaves them awarded once.
func TestSQLHandlerInSubscriberTx(t *testing.T) {
	twicewatermill.Check(t, "award-points-sql", placed, nil, sqlHandler(true),
		config(harness.Config{Faults: sqlFaults}), twicewatermill.SQL("orders", "points"))
}

// Committed on their own, the points land before the offset: a crash
// before the subscriber's commit, or a lost reply to it, has the next
// poll award them again.
func TestSQLHandlerOwnTx(t *testing.T) {
	res := run(t, twicewatermill.Job("award-points-sql", placed, nil, sqlHandler(false), twicewatermill.SQL("orders", "points")),
		harness.Config{Faults: sqlFaults})
	found := map[faults.Name]bool{}
	for _, s := range res.Scenarios {
		if s.Verdict == harness.NotIdempotent {
			found[s.Fault] = true
		}
	}
	assert.True(t, found["crash-mid-job"], "%s", res)
}
