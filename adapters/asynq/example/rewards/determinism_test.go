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

// The example check, under the default matrix (visibility-timeout
// included), gives the same verdict for every schedule on 20 runs, with
// a handler that is idempotent and one that is not: asynq's own server
// runs each delivery, and nothing the adapter decides reads the wall
// clock or races the harness's clock moves.
func TestVerdictsAreDeterministic(t *testing.T) {
	// Long: the project's CI sets TWICE_LONG=1 and runs it once.
	if testing.Short() || os.Getenv("TWICE_LONG") != "1" {
		t.Skip("runs each check 20 times; set TWICE_LONG=1 to run it")
	}
	for name, job := range map[string]func() harness.Job{
		"reward": func() harness.Job {
			return twiceasynq.Job("reward-order", rewards.NewRewardTask(9812, asynq.TaskID("reward-order-9812")), reward)
		},
		"ledger": func() harness.Job {
			return twiceasynq.Job("ledger", rewards.NewRewardTask(9812), func(d *harness.Delivery) asynq.Handler {
				return &rewards.LedgerHandler{Pool: d.DB}
			})
		},
	} {
		t.Run(name, func(t *testing.T) {
			first := verdicts(t, job())
			require.NotEmpty(t, first)
			for i := 2; i <= 20; i++ {
				got := verdicts(t, job())
				if !maps.Equal(got, first) {
					t.Fatalf("run %d's verdicts differ from run 1's:\nrun %d: %v\nrun 1: %v", i, i, got, first)
				}
			}
		})
	}
}
