package orders_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	twicewatermill "github.com/runtwice/twice/adapters/watermill"
	"github.com/runtwice/twice/adapters/watermill/example/orders"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/longtest"
)

// The adapter's example checks give the same verdict for every schedule
// on each of 20 runs: the router's goroutines, the worker's pool and the
// broker's settling leave nothing to chance.
func TestExampleChecksRepeat(t *testing.T) {
	longtest.Skip(t, "runs each example check 20 times")
	noProducer := faults.DefaultWithout(faults.NameProducerRetry, faults.NameConcurrentProducerRetry)
	for _, tc := range []struct {
		name string
		job  harness.Job
		cfg  harness.Config
	}{
		{"inbox", twicewatermill.Job("award-points", placed, nil, handler(true)), harness.Config{}},
		{"deduplicator", twicewatermill.Job("award-points", placed, nil, handler(false), twicewatermill.Middleware(deduplicator)), harness.Config{}},
		{"event handler", twicewatermill.EventJob("award-points-event", orders.OrderPlaced{OrderID: 9812}, orders.ProcessorConfig(), awarder(true)), harness.Config{Faults: noProducer}},
		{"sql own tx", twicewatermill.Job("award-points-sql", placed, nil, sqlHandler(false), twicewatermill.SQL("orders", "points")), harness.Config{Faults: sqlFaults}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var first map[string]result.Verdict
			for i := range 20 {
				got := verdicts(run(t, tc.job, tc.cfg))
				if i == 0 {
					first = got
					continue
				}
				assert.Equal(t, first, got, "run %d of 20", i+1)
			}
		})
	}
}
