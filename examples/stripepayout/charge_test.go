package stripepayout_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runtwice/twice/examples/stripepayout"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

var (
	orderConfig = harness.Config{Setup: []harness.Setup{harness.SQL(stripepayout.OrderSchema)}}

	chargeOrder = harness.Job{Name: "stripe-charge-order", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return stripepayout.Checkout{DB: d.DB, Stripe: stripeClient(d.HTTPClient())}.ChargeOrder(ctx, 9812)
	}}
)

// A second delivery that starts while the first is still between its
// read and its write charges again: found at the pauses before the
// order is marked paid, not after.
func TestChargeOrder(t *testing.T) {
	cfg := orderConfig
	cfg.ExpectFinding = "a delivery the queue gave up on and the redelivery both read the order pending and both charge, each with stripe-go's own key"
	cfg.ExpectPattern = result.KeyPerAttempt
	res := harness.Check(t, chargeOrder, cfg)
	if res.Shard != nil {
		return
	}
	want := map[string]result.Verdict{
		"j1a1w1 > +30s j1a2w2@1:1 order 1,2,2,2,1,1": result.NotIdempotent, // paused after the read
		"j1a1w1 > +30s j1a2w2@1:2 order 1,1,2,2,2,1": result.NotIdempotent, // after the charge
		"j1a1w1 > +30s j1a2w2@1:3 order 1,1,1,2,2,2": result.Idempotent,    // after the order is marked paid
	}
	for _, s := range res.Scenarios {
		if s.Fault != faults.NameVisibilityTimeout {
			continue
		}
		if w, ok := want[s.Schedule.String()]; !ok || s.Verdict != w {
			t.Errorf("visibility-timeout %s = %s, want %s", s.Schedule, s.Verdict, w)
		}
		delete(want, s.Schedule.String())
	}
	for s := range want {
		t.Errorf("visibility-timeout %s did not run", s)
	}
}

// giveUpOnRedelivery is the HTTP client of a job whose first call gives
// up when the job is redelivered, as a client's timeout gives up on a
// call that takes too long: the queue gave up on the first delivery,
// which goes on. stripe-go then retries the call with the same key.
type giveUpOnRedelivery struct {
	next http.RoundTripper
	gone <-chan struct{} // closed when the redelivery starts
	sent atomic.Int32
}

func (g *giveUpOnRedelivery) RoundTrip(req *http.Request) (*http.Response, error) {
	if g.sent.Add(1) > 1 {
		return g.next.RoundTrip(req)
	}
	ctx, cancel := context.WithCancel(req.Context())
	go func() {
		select {
		case <-g.gone:
			cancel()
		case <-ctx.Done():
		}
	}()
	resp, err := g.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = cancelOnClose{resp.Body, cancel}
	return resp, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	defer c.cancel()
	return c.ReadCloser.Close()
}

// impatientChargeOrder is ChargeOrder whose first delivery's charge gives
// up when the redelivery starts: with a pause after the read (the
// schedule holds that charge while the redelivery runs) it gives up
// before its turn, and stripe-go's retry charges once its turn comes.
func impatientChargeOrder() harness.Job {
	var mu sync.Mutex
	var redelivered chan struct{} // the running scenario's
	return harness.Job{Name: "stripe-charge-order-impatient", Handler: func(ctx context.Context, d *harness.Delivery) error {
		mu.Lock()
		if d.Attempt == 1 {
			redelivered = make(chan struct{})
		} else if redelivered != nil {
			close(redelivered)
			redelivered = nil
		}
		gone := redelivered
		mu.Unlock()
		hc := d.HTTPClient()
		if gone != nil {
			hc.Transport = &giveUpOnRedelivery{next: hc.Transport, gone: gone}
		}
		return stripepayout.Checkout{DB: d.DB, Stripe: stripeClient(hc)}.ChargeOrder(ctx, 9812)
	}}
}

// chargeHeld is the visibility timeout of issue 38's Why 5: the queue
// gives up on the first delivery after its read, and its one HTTP call
// waits while the redelivery reads, charges and marks the order paid.
// The finding is that the first delivery then charges too. The executor
// used to grant the call its handler had given up on (a timeout, here
// the redelivery) to nobody, when its turn came: a step that never ended,
// which held back stripe-go's retry of the call until the handler gave
// up on that too, so the first delivery charged or not by timing, and a
// pass went unquestioned.
const chargeHeld = "j1a1w1 > +30s j1a2w2@1:1 order 1,2,2,2,1,1"

// oneVerdict runs chargeHeld n times and fails unless every run is not
// idempotent, confirmed.
func oneVerdict(t *testing.T, n int) {
	sched, err := faults.Parse(chargeHeld)
	if err != nil {
		t.Fatal(err)
	}
	sched.Fault = faults.NameVisibilityTimeout
	cfg := orderConfig
	cfg.Faults = []faults.Fault{faults.Replay(sched)}
	cfg.DeliveryTimeout = 5 * time.Second // a delivery stuck behind a step granted to nobody
	job := impatientChargeOrder()
	verdicts := map[result.Verdict]int{}
	orders := map[string]int{} // how the steps went, for the message
	for range n {
		res, err := harness.Run(t.Context(), job, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range res.Scenarios {
			verdicts[s.Verdict]++
			orders[fmt.Sprint(s.Order)]++
		}
		if err := res.DropDatabases(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if len(verdicts) != 1 || verdicts[result.NotIdempotent] != n {
		t.Errorf("verdicts of %d runs of %s: %v, want %d %s; the steps went %v", n, chargeHeld, verdicts, n, result.NotIdempotent, orders)
	}
}

// The first delivery's charge, given up on while the schedule held it,
// is retried and made: the schedule is a finding every time.
func TestChargeOrderGivenUpCallIsRetried(t *testing.T) {
	oneVerdict(t, 3)
}

// Run 200 times, the schedule has one verdict: not idempotent, confirmed
// each time, never a pass and never flaky.
func TestChargeOrderVisibilityTimeoutHasOneVerdict(t *testing.T) {
	harness.SkipUnlessLong(t, "200 runs of one schedule")
	oneVerdict(t, 200)
}
