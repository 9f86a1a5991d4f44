package harness_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/recordtb"
)

// connectJob connects to the delivery's DSN itself, and closes the
// connection only when closes is set.
func connectJob(name string, closes bool) harness.Job {
	return harness.Job{Name: name, Handler: func(ctx context.Context, d *harness.Delivery) error {
		conn, err := pgx.Connect(ctx, d.DSN)
		if err != nil {
			return err
		}
		if closes {
			defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
		}
		if _, err := d.DB.Exec(ctx, `SELECT 1`); err != nil { // the pool's connection, left idle
			return err
		}
		_, err = conn.Exec(ctx, `UPDATE users SET is_email_verified = true WHERE id = 1`)
		return err
	}}
}

// A handler that opens its own connection on d.DSN and never closes it
// passed without a word: the proxy could not tell it from the delivery
// pool's idle connections. The pool's connections are now marked, and
// the check warns about the other one, naming the delivery (issue 27).
func TestConnectionLeftOpenIsWarned(t *testing.T) {
	rec := recordtb.New(t)
	var res *harness.Result
	rec.Run(func(tb testing.TB) {
		res = harness.Check(tb, connectJob("never-closes", false), harness.Config{Setup: []harness.Setup{harness.SQL(usersSchema)}, Faults: []faults.Fault{faults.RunTwice()}})
	})
	require.NotNil(t, res, "errors %q", rec.Errors())
	require.Empty(t, rec.Errors(), "the check passes")
	require.Len(t, res.Warnings, 1, "%+v", res.Warnings)
	w := res.Warnings[0]
	assert.Equal(t, result.ConnectionLeftOpen, w.Kind)
	assert.Equal(t, 4, w.Deliveries, "both clean runs and both deliveries of run-twice")
	assert.Equal(t, "j1a1w1", w.First.Label())
	assert.Equal(t, 1, w.Connections)
	var warned []string
	for _, l := range rec.Logs() {
		if strings.HasPrefix(l, "[twice] warning: ") {
			warned = append(warned, l)
		}
	}
	require.Len(t, warned, 1, "logs %q", rec.Logs())
	assert.Equal(t, `[twice] warning: job "never-closes": 4 deliveries returned with a connection they opened on d.DSN still open, the first delivery j1a1w1 (attempt 1) of schedule j1a1w1 (a clean run) returned with 1 connection it opened on d.DSN still open; the harness closed them, a worker would keep them until it exits. Close every connection the handler opens (defer conn.Close(ctx)), or use d.DB or d.SQL(), which the harness closes`, warned[0])
}

// The same handler closing its connection, and one whose pool
// connection stays idle at return, get no warning.
func TestConnectionClosedIsNoWarning(t *testing.T) {
	res, err := harness.Run(t.Context(), connectJob("closes", true), harness.Config{Setup: []harness.Setup{harness.SQL(usersSchema)}, Faults: []faults.Fault{faults.RunTwice(), faults.CrashBeforeAck()}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	assert.True(t, res.Idempotent())
	assert.Empty(t, res.Warnings)
}
