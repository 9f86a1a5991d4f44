package orders_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// The same check gives the same verdict per schedule every time: the
// group's join, rebalance and commit refusals run on kfake's and
// franz-go's goroutines, and must not make a verdict depend on their
// timing. The faults are those that move the partition, withhold a
// commit or start a delivery right after another's last step
// (visibility-timeout, whose second delivery once raced the first one's
// return and ack in the executor). The correct job, the inbox by key,
// stays quiet on every run. 30 runs in the long tests (issue 27: every
// correct job stays quiet across 30), 3 otherwise.
func TestVerdictsRepeat(t *testing.T) {
	repeats := 3
	if harness.Long() {
		repeats = 30
	}
	c := cfg
	c.Faults = []faults.Fault{faults.CrashBeforeAck(), faults.LostAck(), faults.ConcurrentDelivery(), faults.ProducerRetry(), faults.VisibilityTimeout()}
	for _, tc := range []struct {
		job     harness.Job
		correct bool // every verdict is idempotent, on every run
	}{{inboxByKey(), true}, {writeThenCommit(), false}, {transactional(), false}} {
		t.Run(tc.job.Name, func(t *testing.T) {
			var first map[string]result.Verdict
			for i := 1; i <= repeats; i++ {
				res, err := harness.Run(context.Background(), tc.job, c)
				require.NoError(t, err)
				got := map[string]result.Verdict{}
				for _, s := range res.Scenarios {
					got[s.Schedule.String()] = s.Verdict
				}
				_ = res.DropDatabases(context.Background())
				if tc.correct {
					for sched, v := range got {
						require.Equal(t, result.Idempotent, v, "run %d of a correct job: %s", i, sched)
					}
				}
				if first == nil {
					first = got
					continue
				}
				assert.Equal(t, first, got, "run %d", i)
			}
		})
	}
}
