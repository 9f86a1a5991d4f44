package loyalty_test

import (
	"fmt"
	"maps"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vgarvardt/gue/v5"

	twicegue "github.com/runtwice/twice/adapters/gue"
	"github.com/runtwice/twice/adapters/gue/example/loyalty"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/internal/longtest"
)

// verdicts is one check's verdict per schedule.
func verdicts(t *testing.T, job harness.Job) map[string]string {
	t.Helper()
	res := run(t, job, cfg)
	out := map[string]string{}
	for _, s := range res.Scenarios {
		out[fmt.Sprintf("%s %s", s.Fault, s.Schedule)] = string(s.Verdict)
	}
	return out
}

// The example checks, under the default matrix, give the same verdict for
// every schedule on 20 runs, with a WorkFunc that is idempotent (its
// write in gue's own transaction) and one that is not (its write on its
// own pool): gue's transaction and the adapter's due check run on the
// harness clock, and nothing races its moves.
func TestVerdictsAreDeterministic(t *testing.T) {
	longtest.Skip(t, "runs each example check 20 times")
	for name, job := range map[string]func() harness.Job{
		"reward": func() harness.Job { return reward(loyalty.Reward) },
		"ledger": func() harness.Job {
			return twicegue.Job("ledger-order", twicegue.Spec[loyalty.RewardArgs]{Type: loyalty.LedgerType, Args: order},
				func(d *harness.Delivery) gue.WorkFunc { return loyalty.Ledger{Pool: d.DB}.Work })
		},
	} {
		t.Run(name, func(t *testing.T) {
			first := verdicts(t, job())
			require.NotEmpty(t, first)
			for i := 2; i <= 20; i++ {
				if got := verdicts(t, job()); !maps.Equal(got, first) {
					t.Fatalf("run %d's verdicts differ from run 1's:\nrun %d: %v\nrun 1: %v", i, i, got, first)
				}
			}
		})
	}
}
