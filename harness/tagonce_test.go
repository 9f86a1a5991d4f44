package harness_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/examples/loyalty"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/recordtb"
)

// Every message a check sends through its testing.TB, whether the job's
// finding, the user's mistake or a log line, starts with the [twice] tag
// and carries it once: the tag is added where the message reaches the
// test (issue 36), not at every error site it passed through.
func TestEveryMessageIsTaggedOnce(t *testing.T) {
	schema := harness.SQLFiles("../examples/loyalty/schema.sql")
	increment := harness.Job{Name: "reward-by-increment", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return loyalty.RewardByIncrement(ctx, d.DB, 77, 9812)
	}}
	tests := []struct {
		name    string
		job     harness.Job
		cfg     harness.Config
		explore bool
		env     map[string]string
		// want is in some message, errors or logs.
		want string
	}{
		{name: "nameless job", job: harness.Job{Handler: increment.Handler},
			want: "[twice] Job.Name is empty"},
		{name: "two handlers", job: harness.Job{Name: "two", Handler: increment.Handler, NewWorker: func() harness.Handler { return increment.Handler }},
			want: `[twice] job "two" sets both Handler and NewWorker`},
		{name: "no faults", job: increment, cfg: harness.Config{Setup: []harness.Setup{schema}, Faults: []faults.Fault{}},
			want: "[twice] Config.Faults is empty"},
		{name: "a fault that means nothing", job: increment, cfg: harness.Config{Setup: []harness.Setup{schema}, Faults: []faults.Fault{faults.CrashAt(0)}},
			want: "[twice] Config.Faults[0] (crash-mid-job): "},
		{name: "bad flag", job: increment, cfg: harness.Config{Setup: []harness.Setup{schema}}, explore: true, env: map[string]string{harness.ChecksEnv: "many"},
			want: `[twice] -twice.checks or TWICE_CHECKS is "many"`},
		{name: "setup fails", job: increment, cfg: harness.Config{Setup: []harness.Setup{harness.SQL("SELECT nonsense FROM nowhere")}},
			want: "[twice] setup step"},
		{name: "clean run fails", job: harness.Job{Name: "fails", Handler: func(context.Context, *harness.Delivery) error { return errors.New("no such customer") }},
			cfg:  harness.Config{Setup: []harness.Setup{schema}},
			want: `[twice] job "fails" failed on its clean reference run 1`},
		{name: "finding", job: increment, cfg: harness.Config{Setup: []harness.Setup{schema}, Faults: []faults.Fault{faults.RunTwice()}},
			want: `[twice] not idempotent: job "reward-by-increment"`},
		{name: "expected finding", job: increment, cfg: harness.Config{Setup: []harness.Setup{schema}, Faults: []faults.Fault{faults.RunTwice()}, ExpectFinding: "adds per delivery"},
			want: "[twice] expected finding (adds per delivery):\nnot idempotent: "},
		{name: "expected finding without its pattern", job: increment,
			cfg:  harness.Config{Setup: []harness.Setup{schema}, Faults: []faults.Fault{faults.RunTwice()}, ExpectFinding: "adds per delivery", ExpectPattern: result.CheckThenAct},
			want: `[twice] job "reward-by-increment": the expected finding (adds per delivery) shows no check-then-act culprit`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			rec := recordtb.New(t)
			rec.Run(func(tb testing.TB) {
				if tt.explore {
					harness.Explore(tb, tt.job, tt.cfg, harness.ExploreOptions{})
					return
				}
				harness.Check(tb, tt.job, tt.cfg)
			})
			msgs := append(rec.Errors(), rec.Logs()...)
			require.NotEmpty(t, msgs)
			for _, m := range msgs {
				assert.True(t, strings.HasPrefix(m, "[twice] "), "message lacks the tag at its start: %q", m)
				assert.Equal(t, 1, strings.Count(m, "[twice]"), "message tagged more than once: %q", m)
			}
			assert.Contains(t, strings.Join(msgs, "\n"), tt.want)
		})
	}
}
