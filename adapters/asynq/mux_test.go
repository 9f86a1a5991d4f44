package twiceasynq_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twiceasynq "github.com/runtwice/twice/adapters/asynq"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/recordtb"
)

// newMux is the production worker's mux, built on its pool: three
// handlers, one of them for every email task by a prefix pattern.
func newMux(pool *pgxpool.Pool) *asynq.ServeMux {
	mux := asynq.NewServeMux()
	mux.Handle("points:set", setPoints(pool))
	mux.HandleFunc("points:add", func(ctx context.Context, task *asynq.Task) error {
		var args setArgs
		if err := json.Unmarshal(task.Payload(), &args); err != nil {
			return err
		}
		// Adds on every run: not idempotent.
		_, err := pool.Exec(ctx, `UPDATE accounts SET points = points + 10 WHERE id = $1`, args.Account)
		return err
	})
	mux.HandleFunc("email:", func(ctx context.Context, task *asynq.Task) error {
		var args setArgs
		if err := json.Unmarshal(task.Payload(), &args); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, `INSERT INTO welcomed (account, kind) VALUES ($1, $2) ON CONFLICT DO NOTHING`, args.Account, task.Type())
		return err
	})
	return mux
}

// sample is a job of the task typ, worked by the production mux itself,
// built on the delivery's pool: the mux routes it as in production.
func sample(t *testing.T, typ string) harness.Job {
	payload, err := json.Marshal(setArgs{Account: 7})
	require.NoError(t, err)
	return twiceasynq.Job(typ, asynq.NewTask(typ, payload),
		func(d *harness.Delivery) asynq.Handler { return newMux(d.DB) })
}

var welcome = harness.Config{
	Setup: []harness.Setup{harness.SQL(`CREATE TABLE accounts (id bigint PRIMARY KEY, points int NOT NULL); INSERT INTO accounts VALUES (7, 0);
CREATE TABLE welcomed (account bigint, kind text, PRIMARY KEY (account, kind))`)},
	Faults: []faults.Fault{faults.RunTwice(), faults.CrashBeforeAck()},
}

// Patterns lists what a mux registers.
func TestPatternsOfAMux(t *testing.T) {
	patterns, err := twiceasynq.Patterns(newMux(nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"email:", "points:add", "points:set"}, patterns)
	_, err = twiceasynq.Patterns(nil)
	assert.ErrorContains(t, err, "the mux is nil")
}

// A mux with three handlers and samples for two: the check runs the two
// and fails naming the third. With all three (the email sample reaching
// its handler by prefix) each passes or is found as it deserves; a
// sample no pattern matches fails.
func TestCheckMuxNamesTheHandlerWithoutASample(t *testing.T) {
	add := harness.Sample{Job: sample(t, "points:add"), ExpectFinding: "adds 10 points on every run", ExpectPattern: result.IncrementWithoutRecord}
	rec := recordtb.New(t)
	var results []*harness.Result
	rec.Run(func(tb testing.TB) {
		results = twiceasynq.CheckMux(tb, newMux(nil), welcome, harness.Sample{Job: sample(t, "points:set")}, add)
	})
	assert.Contains(t, strings.Join(rec.Errors(), "\n"), "[twice] the asynq ServeMux registers 1 kind that no sample checks: email:;")
	require.Len(t, results, 2)
	assert.Equal(t, result.OutcomeIdempotent, results[0].Outcome)
	assert.Equal(t, result.OutcomeExpectedFinding, results[1].Outcome)

	results = twiceasynq.CheckMux(t, newMux(nil), welcome, harness.Sample{Job: sample(t, "points:set")}, add, harness.Sample{Job: sample(t, "email:welcome")})
	require.Len(t, results, 3)
	assert.Equal(t, result.OutcomeIdempotent, results[2].Outcome)

	rec = recordtb.New(t)
	rec.Run(func(tb testing.TB) {
		twiceasynq.CheckMux(tb, newMux(nil), welcome, harness.Sample{Job: sample(t, "points:set")}, add, harness.Sample{Job: sample(t, "email:welcome")}, harness.Sample{Job: sample(t, "sms:welcome")})
	})
	assert.Contains(t, strings.Join(rec.Errors(), "\n"), "[twice] samples check 1 kind the asynq ServeMux does not hold: sms:welcome;")
}
