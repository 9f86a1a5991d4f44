package orders_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twicewatermill "github.com/runtwice/twice/adapters/watermill"
	"github.com/runtwice/twice/adapters/watermill/example/orders"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// repeats is how many times each example check runs (issue 27: every
// correct job stays quiet across 30).
const repeats = 30

// The adapter's example checks give the same verdict for every schedule
// on each of 30 runs (the in-memory Deduplicator's, 10), and the correct jobs (the inbox handler, the event
// handler with its inbox and the SQL handler in the subscriber's
// transaction, each under the faults its check runs) stay quiet on every
// one: the router's goroutines, the worker's pool and the broker's
// settling leave nothing to chance.
func TestExampleChecksRepeat(t *testing.T) {
	harness.SkipUnlessLong(t, "runs each example check 30 times")
	noProducer := faults.DefaultWithout(faults.NameProducerRetry, faults.NameConcurrentProducerRetry)
	for _, tc := range []struct {
		name    string
		job     harness.Job
		cfg     harness.Config
		correct bool // every verdict is idempotent, on every run
		repeats int  // runs, when not the package's repeats
	}{
		{"inbox", twicewatermill.Job("award-points", placed, nil, handler(true)), harness.Config{Faults: noProducer}, true, 0},
		{"event handler", twicewatermill.EventJob("award-points-event", orders.OrderPlaced{OrderID: 9812}, orders.ProcessorConfig(), awarder(true)), harness.Config{Faults: noProducer}, true, 0},
		{"sql subscriber tx", twicewatermill.Job("award-points-sql", placed, nil, sqlHandler(true), twicewatermill.SQL("orders", "points")), harness.Config{Faults: sqlFaults}, true, 0},
		{"sql own tx", twicewatermill.Job("award-points-sql", placed, nil, sqlHandler(false), twicewatermill.SQL("orders", "points")), harness.Config{Faults: sqlFaults}, false, 0},
		// Last, and 10 times, not 30: Watermill's in-memory Deduplicator
		// starts a cleanup goroutine per router that never ends
		// (NewMapExpiringKeyRepository, context.Background()), about 270 a
		// check, and every handler return reads every goroutine's stack
		// to find the ones it left running: run k costs about k times
		// the first, 30 runs took most of CI's half hour in this package.
		{"deduplicator", twicewatermill.Job("award-points", placed, nil, handler(false), twicewatermill.Middleware(deduplicator)), harness.Config{}, false, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := repeats
			if tc.repeats != 0 {
				n = tc.repeats
			}
			var first map[string]result.Verdict
			for i := 1; i <= n; i++ {
				got := verdicts(run(t, tc.job, tc.cfg))
				if first == nil {
					first = got
				} else {
					assert.Equal(t, first, got, "run %d of %d", i, n)
				}
				if tc.correct {
					for sched, v := range got {
						require.Equal(t, result.Idempotent, v, "run %d of a correct job: %s", i, sched)
					}
				}
			}
		})
	}
}
