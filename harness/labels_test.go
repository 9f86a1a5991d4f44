package harness_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/record"
)

// stoppedTB is a test whose Fatalf is recorded instead of ending the
// goroutine, so the check's message and record can be asserted.
type stoppedTB struct {
	testing.TB
	fatal []string
}

func (s *stoppedTB) Fatalf(format string, args ...any) {
	s.fatal = append(s.fatal, fmt.Sprintf(format, args...))
}
func (s *stoppedTB) Errorf(format string, args ...any) {
	s.fatal = append(s.fatal, fmt.Sprintf(format, args...))
}

// A check stopped by the user's own code (a handler, a worker factory, a
// setup step) says so, names the job and the delivery, and is recorded as
// the user's error: never "internal", never a harness error (issue 27).
func TestUsersErrorIsLabelledTheirs(t *testing.T) {
	update := func(ctx context.Context, d *harness.Delivery) error {
		_, err := d.DB.Exec(ctx, `UPDATE users SET is_email_verified = true WHERE id = 1`)
		return err
	}
	tests := []struct {
		name  string
		job   harness.Job
		setup []harness.Setup
		want  string
	}{{
		name: "handler panics",
		job:  harness.Job{Name: "p", Handler: func(context.Context, *harness.Delivery) error { panic("boom") }},
		want: `[twice] job "p" failed on its clean reference run 1 (delivery j1a1w1), so there is nothing to compare with: handler panicked: boom`,
	}, {
		name: "handler fails",
		job:  harness.Job{Name: "p", Handler: func(context.Context, *harness.Delivery) error { return errors.New("no such customer") }},
		want: `[twice] job "p" failed on its clean reference run 1 (delivery j1a1w1), so there is nothing to compare with: no such customer`,
	}, {
		name: "worker factory panics",
		job:  harness.Job{Name: "p", NewWorker: func() harness.Handler { panic("no config") }},
		want: `[twice] job "p" failed on its clean reference run 1 (delivery j1a1w1), so there is nothing to compare with: job "p": NewWorker panicked: no config`,
	}, {
		name:  "setup func fails",
		job:   harness.Job{Name: "p", Handler: update},
		setup: []harness.Setup{harness.Func(func(context.Context, *pgx.Conn) error { return errors.New("no seed file") })},
		want:  "[twice] setup step github.com/runtwice/twice/harness_test.TestUsersErrorIsLabelledTheirs.func",
	}, {
		name:  "setup SQL fails",
		job:   harness.Job{Name: "p", Handler: update},
		setup: []harness.Setup{harness.SQL("INSERT INTO users VALUES (1);")},
		want:  `[twice] setup step failed: SQL, the statement on line 1: ERROR: duplicate key value violates unique constraint "users_pkey"`,
	}, {
		name: "a fault that means nothing",
		job:  harness.Job{Name: "p", Handler: update},
		want: "[twice] Config.Faults[0] (crash-mid-job): faults.CrashAt(0)",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv(record.DirEnv, dir)
			cfg := harness.Config{Setup: append([]harness.Setup{harness.SQL(usersSchema)}, tt.setup...), Faults: []faults.Fault{faults.RunTwice()}}
			if tt.name == "a fault that means nothing" {
				cfg.Faults = []faults.Fault{faults.CrashAt(0)}
			}
			tb := &stoppedTB{TB: t}
			harness.Check(tb, tt.job, cfg)
			require.Len(t, tb.fatal, 1)
			assert.True(t, strings.HasPrefix(tb.fatal[0], tt.want), "message %q, want it to start %q", tb.fatal[0], tt.want)
			assert.NotContains(t, tb.fatal[0], "[twice] internal") // a panic's stack names twice's internal packages
			recs, err := record.Read(dir)
			require.NoError(t, err)
			require.Len(t, recs, 1)
			assert.Equal(t, result.OutcomeUserError, recs[0].Result.Outcome)
		})
	}
}
