package twicewatermill_test

import (
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twicewatermill "github.com/runtwice/twice/adapters/watermill"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/recordtb"
)

// newRouter is the production service's router, built on its pool: three
// handlers on an in-process pub/sub.
func newRouter(t *testing.T, pool *pgxpool.Pool) *message.Router {
	logger := watermill.NopLogger{}
	r, err := message.NewRouter(message.RouterConfig{}, logger)
	require.NoError(t, err)
	ps := gochannel.NewGoChannel(gochannel.Config{}, logger)
	exec := func(sql string) message.NoPublishHandlerFunc {
		return func(msg *message.Message) error {
			_, err := pool.Exec(msg.Context(), sql, msg.UUID)
			return err
		}
	}
	r.AddConsumerHandler("set-points", "points.set", ps, exec(`UPDATE accounts SET points = 50 WHERE id = 7 AND $1::text IS NOT NULL`))
	// Adds on every run: not idempotent.
	r.AddConsumerHandler("add-points", "points.add", ps, exec(`UPDATE accounts SET points = points + 10 WHERE id = 7 AND $1::text IS NOT NULL`))
	r.AddConsumerHandler("welcome", "accounts.created", ps, exec(`INSERT INTO welcomed (message) VALUES ($1) ON CONFLICT DO NOTHING`))
	return r
}

// sample is a job worked by the production router's own handler name,
// built on the delivery's pool.
func sample(t *testing.T, name string) harness.Job {
	return twicewatermill.Job(name, message.Payload(`{"account":7}`), nil, func(d *harness.Delivery) message.HandlerFunc {
		return newRouter(t, d.DB).Handlers()[name]
	})
}

var welcome = harness.Config{
	Setup: []harness.Setup{harness.SQL(`CREATE TABLE accounts (id bigint PRIMARY KEY, points int NOT NULL); INSERT INTO accounts VALUES (7, 0);
CREATE TABLE welcomed (message text PRIMARY KEY)`)},
	Faults: accounts.Faults,
}

// HandlerNames lists what a router registers.
func TestHandlerNamesOfARouter(t *testing.T) {
	names, err := twicewatermill.HandlerNames(newRouter(t, nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"add-points", "set-points", "welcome"}, names)
	_, err = twicewatermill.HandlerNames(nil)
	assert.ErrorContains(t, err, "the router is nil")
}

// A router with three handlers and samples for two: the check runs the
// two and fails naming the third. With all three each passes or is
// found as it deserves.
func TestCheckRouterNamesTheHandlerWithoutASample(t *testing.T) {
	add := harness.Sample{Job: sample(t, "add-points"), ExpectFinding: "adds 10 points on every run", ExpectPattern: result.IncrementWithoutRecord}
	rec := recordtb.New(t)
	var results []*harness.Result
	rec.Run(func(tb testing.TB) {
		results = twicewatermill.CheckRouter(tb, newRouter(t, nil), welcome, harness.Sample{Job: sample(t, "set-points")}, add)
	})
	assert.Contains(t, strings.Join(rec.Errors(), "\n"), "[twice] the Watermill router registers 1 kind that no sample checks: welcome;")
	require.Len(t, results, 2)
	assert.Equal(t, result.OutcomeIdempotent, results[0].Outcome)
	assert.Equal(t, result.OutcomeExpectedFinding, results[1].Outcome)

	results = twicewatermill.CheckRouter(t, newRouter(t, nil), welcome, harness.Sample{Job: sample(t, "set-points")}, add, harness.Sample{Job: sample(t, "welcome")})
	require.Len(t, results, 3)
	assert.Equal(t, result.OutcomeIdempotent, results[2].Outcome)
}
