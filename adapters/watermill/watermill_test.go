package twicewatermill_test

import (
	"context"
	"testing"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twicewatermill "github.com/runtwice/twice/adapters/watermill"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

// setPoints sets the account's points, in watermill-sql's transaction when
// there is one: idempotent under every fault.
func setPoints(d *harness.Delivery) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		const set = `UPDATE accounts SET points = 50 WHERE id = 7`
		if tx, ok := wsql.TxFromContext(ctx); ok {
			_, err := tx.ExecContext(ctx, set)
			return nil, err
		}
		_, err := d.DB.Exec(ctx, set)
		return nil, err
	}
}

// The config names only the job's own table: the broker's come with the
// job.
var accounts = harness.Config{
	Setup:  []harness.Setup{harness.SQL(`CREATE TABLE accounts (id bigint PRIMARY KEY, points int NOT NULL); INSERT INTO accounts VALUES (7, 0)`)},
	Faults: []faults.Fault{faults.RunTwice(), faults.CrashBeforeAck(), faults.CrashAtEveryStep()},
}

// Two watermill-sql topics in one test binary build two templates: the
// schema's name, which keys the template, carries the topic.
func TestSQLTopicsKeepTheirTables(t *testing.T) {
	for _, topic := range []string{"first_topic", "second_topic"} {
		job := twicewatermill.Job("set-points-"+topic, []byte(`{"account":7}`), nil, setPoints, twicewatermill.SQL(topic, "points"))
		res, err := harness.Run(t.Context(), job, harness.Config{Setup: accounts.Setup, Faults: []faults.Fault{faults.RunTwice()}})
		require.NoError(t, err, topic)
		t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
		assert.True(t, res.Idempotent(), "%s: %s", topic, res)
	}
}
