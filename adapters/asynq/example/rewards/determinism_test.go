package rewards_test

import (
	"fmt"
	"maps"
	"os"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	twiceasynq "github.com/runtwice/twice/adapters/asynq"
	"github.com/runtwice/twice/adapters/asynq/example/rewards"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// verdicts is one check's verdict per schedule.
func verdicts(t *testing.T, job harness.Job) map[string]string {
	res := run(t, job, cfg)
	out := map[string]string{}
	for _, s := range res.Scenarios {
		out[fmt.Sprintf("%s %s", s.Fault, s.Schedule)] = string(s.Verdict)
	}
	return out
}

// repeats is how many times each example check runs (issue 27: every
// correct job stays quiet across 30).
const repeats = 30

// The example check, under the default matrix (visibility-timeout
// included), gives the same verdict for every schedule on 30 runs, with
// a handler that is idempotent, which stays quiet on every run, and one
// that is not: asynq's own server runs each delivery, and nothing the
// adapter decides reads the wall clock or races the harness's clock
// moves. The reward handler is the package's one correct job.
func TestVerdictsAreDeterministic(t *testing.T) {
	// Long: the project's CI sets TWICE_LONG=1 and runs it once.
	if testing.Short() || os.Getenv("TWICE_LONG") != "1" {
		t.Skip("runs each check 30 times; set TWICE_LONG=1 to run it")
	}
	for _, tc := range []struct {
		name    string
		job     func() harness.Job
		correct bool // every verdict is idempotent, on every run
	}{
		{"reward", func() harness.Job {
			return twiceasynq.Job("reward-order", rewards.NewRewardTask(9812, asynq.TaskID("reward-order-9812")), reward)
		}, true},
		{"ledger", func() harness.Job {
			return twiceasynq.Job("ledger", rewards.NewRewardTask(9812), func(d *harness.Delivery) asynq.Handler {
				return &rewards.LedgerHandler{Pool: d.DB}
			})
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var first map[string]string
			for i := 1; i <= repeats; i++ {
				got := verdicts(t, tc.job())
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
