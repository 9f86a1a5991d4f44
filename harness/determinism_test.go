package harness_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

// repeats is how often a determinism test runs its schedule: a few times
// always, many with TWICE_LONG=1.
func repeats() int {
	if os.Getenv("TWICE_LONG") == "1" {
		return 100
	}
	return 20
}

// outcomeOf is what must not change between two runs of one schedule:
// the verdict, and per delivery whether the queue handed it out, how it
// settled and what the schedule did to it.
func outcomeOf(res *harness.Result) string {
	var b strings.Builder
	for _, s := range res.Scenarios {
		fmt.Fprintf(&b, "%s %s:", s.Schedule, s.Verdict)
		for _, d := range s.Deliveries {
			fmt.Fprintf(&b, " [%s kind=%s not-delivered=%q settled=%q fault=%q steps=%d]",
				d.Delivery.Label(), d.Kind, d.NotDelivered, d.Settled, d.Fault, len(d.Completed()))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// The second delivery of a visibility timeout after the first one's last
// step starts while the first still runs: the clock moves and the queue
// is asked for it before the first delivery's return is acked, however
// soon the handler returns. The executor used to take the return and the
// clock move in whichever order the events came (issue 23: asynq's
// visibility-timeout j1a1w1 > +2m j1a2w2@1:3 failed 1 of 6 repeats), so
// the queue saw the ack first in some runs and the fetch first in others.
func TestVisibilityTimeoutAfterLastStepIsDeterministic(t *testing.T) {
	job := harness.Job{Name: "add-points", Queue: tableQueue{redeliver: 2 * time.Minute, holdRunning: true, oneDelivery: true},
		Handler: exec(`UPDATE rewards SET points = points + 50 WHERE order_id = 1`)}
	sched, err := faults.Parse("j1a1w1 > +2m j1a2w2@1:1")
	require.NoError(t, err)
	sched.Fault = faults.NameVisibilityTimeout
	var first string
	for i := range repeats() {
		res := runQueue(t, job, queueConfig(faults.Replay(sched)))
		got := outcomeOf(res)
		if i == 0 {
			first = got
			require.Contains(t, got, "j1a2w2 kind=redelivery not-delivered=\"\"",
				"the second delivery is handed out: the first had not been acked when the clock passed its lease")
			continue
		}
		require.Equal(t, first, got, "run %d of the same schedule", i+1)
	}
}
