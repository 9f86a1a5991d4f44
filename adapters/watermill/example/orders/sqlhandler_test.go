package orders_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twicewatermill "github.com/runtwice/twice/adapters/watermill"
	"github.com/runtwice/twice/adapters/watermill/example/orders"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

func sqlHandler(inTx bool) func(*harness.Delivery) message.HandlerFunc {
	return func(d *harness.Delivery) message.HandlerFunc {
		return orders.SQLHandler{DB: d.DB, InSubscriberTx: inTx}.Handle
	}
}

// A producer copy is another message in the topic, which the consumer
// group handles too: left out here.
var sqlFaults = faults.DefaultWithout(faults.NameProducerRetry, faults.NameConcurrentProducerRetry)

// Written in watermill-sql's transaction, the points commit with the
// consumer group's offset: every fault leaves them awarded once.
func TestSQLHandlerInSubscriberTx(t *testing.T) {
	harness.Check(t, twicewatermill.Job("award-points-sql", placed, nil, sqlHandler(true), twicewatermill.SQL("orders", "points")),
		config(harness.Config{Faults: sqlFaults}))
}

// Committed on their own, the points land before the offset: a crash
// before the subscriber's offset update or commit (also before a redrive),
// or a lost reply to the handler's own commit, has the next poll award
// them again.
func TestSQLHandlerOwnTx(t *testing.T) {
	res := run(t, twicewatermill.Job("award-points-sql", placed, nil, sqlHandler(false), twicewatermill.SQL("orders", "points")),
		harness.Config{Faults: sqlFaults})
	found := map[faults.Name]bool{}
	for _, s := range res.Scenarios {
		if s.Verdict == result.NotIdempotent {
			found[s.Fault] = true
		}
	}
	assert.Equal(t, map[faults.Name]bool{"crash-mid-job": true, "ambiguous-commit": true, "redrive": true}, found, "%s", res)
}

// The subscriber's own statements run on the delivery's connections, so
// the offset update and the commit that acks the message are steps, after
// the handler's writes in the same transaction.
func TestSQLAckIsAStepOfTheDelivery(t *testing.T) {
	res := run(t, twicewatermill.Job("award-points-sql", placed, nil, sqlHandler(true), twicewatermill.SQL("orders", "points")),
		harness.Config{Faults: []faults.Fault{faults.RunTwice()}})
	var steps []string
	for _, s := range res.Steps {
		steps = append(steps, strings.Join(strings.Fields(s.SQL), " "))
	}
	ledger := slices.IndexFunc(steps, func(s string) bool { return strings.HasPrefix(s, "INSERT INTO ledger") })
	ack := slices.IndexFunc(steps, func(s string) bool {
		return strings.HasPrefix(s, `INSERT INTO "watermill_offsets_orders"(offset_acked`)
	})
	require.True(t, ledger >= 0 && ack > ledger, "steps: %q", steps)
	assert.Equal(t, "COMMIT", strings.ToUpper(steps[ack+1]), "steps: %q", steps)
}

// A handler that panics inside watermill-sql's transaction is recovered by
// the router and nacked, and watermill-sql resends it in the same
// transaction; once Redeliveries runs out the delivery fails with a
// message naming the job and the message, and the poll's transaction rolls
// back: nothing hangs.
func TestSQLPanickingHandler(t *testing.T) {
	job := twicewatermill.Job("award-points-sql", placed, nil, func(*harness.Delivery) message.HandlerFunc {
		return func(*message.Message) ([]*message.Message, error) { panic("no ledger") }
	}, twicewatermill.SQL("orders", "points"))
	_, err := harness.Run(context.Background(), job, config(harness.Config{Faults: []faults.Fault{faults.RunTwice()}}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `job "award-points-sql": the handler panicked on message `+twicewatermill.MessageUUID("award-points-sql", "1")+
		` of job 1 (attempt 1, first, try 4 in this process): no ledger`)
}

// watermill-sql v4.1.2 resends a nacked message in the same transaction
// (its TxFromContext documentation says a nack rolls back): when the
// courier refuses the booking after the points were written, the resend
// writes them again in the transaction that then commits.
func TestSQLNackKeepsTheFailedTrysWrites(t *testing.T) {
	res := run(t, twicewatermill.Job("award-points-sql", placed, nil, func(d *harness.Delivery) message.HandlerFunc {
		return orders.SQLHandler{DB: d.DB, InSubscriberTx: true, Courier: courier{d}}.Handle
	}, twicewatermill.SQL("orders", "points")), harness.Config{Faults: []faults.Fault{faults.EffectFailures()}})
	require.Len(t, res.Scenarios, 1)
	s := res.Scenarios[0]
	assert.Equal(t, result.NotIdempotent, s.Verdict, "%s", res)
	var tables []string
	for _, d := range s.StateDiff {
		tables = append(tables, d.Table)
	}
	assert.Contains(t, tables, "ledger", "%s", res)
}
