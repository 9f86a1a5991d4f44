package loyalty_test

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vgarvardt/gue/v5"

	twicegue "github.com/runtwice/twice/adapters/gue"
	"github.com/runtwice/twice/adapters/gue/example/loyalty"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// verdicts is one check's verdict per schedule.
func verdicts(t *testing.T, job harness.Job, c harness.Config) map[string]string {
	t.Helper()
	res := run(t, job, c)
	out := map[string]string{}
	for _, s := range res.Scenarios {
		out[fmt.Sprintf("%s %s", s.Fault, s.Schedule)] = string(s.Verdict)
	}
	return out
}

// repeats is how many times each example check runs (issue 27: every
// correct job stays quiet across 30).
const repeats = 30

// The example checks give the same verdict for every schedule on 30
// runs, with WorkFuncs that are idempotent (the reward's write in gue's
// own transaction, the reminder's snooze on the harness clock), which
// stay quiet on every run, and one that is not (the ledger's write on
// its own pool): gue's transaction and the adapter's due check run on
// the harness clock, and nothing races its moves.
func TestVerdictsAreDeterministic(t *testing.T) {
	harness.SkipUnlessLong(t, "runs each example check 30 times")
	noCopies := cfg
	noCopies.Faults = faults.DefaultWithout(faults.NameProducerRetry, faults.NameConcurrentProducerRetry)
	due := time.Date(2026, 1, 1, 9, 5, 0, 0, time.UTC) // as TestRescheduleIsNotAFinding
	for _, tc := range []struct {
		name    string
		job     func() harness.Job
		cfg     harness.Config
		correct bool // every verdict is idempotent, on every run
	}{
		{"reward", func() harness.Job { return reward(loyalty.Reward) }, cfg, true},
		{"reminder", func() harness.Job {
			return twicegue.Job("reminder", twicegue.Spec[loyalty.ReminderArgs]{Type: loyalty.ReminderType, Args: loyalty.ReminderArgs{OrderID: 9812, DueAt: due}},
				func(d *harness.Delivery) gue.WorkFunc { return loyalty.Reminder{Now: d.Now}.Work })
		}, noCopies, true},
		{"ledger", func() harness.Job {
			return twicegue.Job("ledger-order", twicegue.Spec[loyalty.RewardArgs]{Type: loyalty.LedgerType, Args: order},
				func(d *harness.Delivery) gue.WorkFunc { return loyalty.Ledger{Pool: d.DB}.Work })
		}, cfg, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var first map[string]string
			for i := 1; i <= repeats; i++ {
				got := verdicts(t, tc.job(), tc.cfg)
				require.NotEmpty(t, got)
				if first == nil {
					first = got
				} else if !maps.Equal(got, first) {
					t.Fatalf("run %d's verdicts differ from run 1's:\nrun %d: %v\nrun 1: %v", i, i, got, first)
				}
				if tc.correct {
					for sched, v := range got {
						require.Equal(t, string(result.Idempotent), v, "run %d of a correct job: %s", i, sched)
					}
				}
			}
		})
	}
}
