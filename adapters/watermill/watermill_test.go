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

// harness.Run, harness.Check and harness.Explore of a Watermill job need
// no Watermill-specific setup, on the modelled broker and on
// watermill-sql: the job carries the broker's tables.
func TestJobCarriesItsBroker(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []twicewatermill.Option
	}{
		{"modelled broker", nil},
		{"watermill-sql", []twicewatermill.Option{twicewatermill.SQL("accounts_topic", "points")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			job := twicewatermill.Job("set-points", []byte(`{"account":7}`), nil, setPoints, tt.opts...)
			res, err := harness.Run(t.Context(), job, accounts)
			require.NoError(t, err)
			t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
			assert.True(t, res.Idempotent(), "%s", res)
			require.GreaterOrEqual(t, len(res.Scenarios), 3)
			var names []string
			for _, tb := range res.Reference.Tables {
				names = append(names, tb.Name)
			}
			assert.Equal(t, []string{"accounts"}, names, "the broker's tables are made by the job's queue and left out of the comparison")

			harness.Check(t, job, accounts)

			x := harness.Explore(t, job, explorable(accounts), harness.ExploreOptions{Checks: 5, Dir: t.TempDir()})
			assert.False(t, x.Failed(), "%+v", x)
			assert.Positive(t, x.Executed)
		})
	}
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

// explorable is cfg without its Faults: exploration draws its own
// schedules and refuses Config.Faults.
func explorable(cfg harness.Config) harness.Config {
	cfg.Faults = nil
	return cfg
}
