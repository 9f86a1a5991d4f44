package stripepayout_test

import (
	"context"
	"testing"

	"github.com/stripe/stripe-go/v82"

	"github.com/runtwice/twice/examples/stripepayout"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// As production's start-up does: the global backend is stripe-go's own,
// on its default HTTP client.
func init() {
	stripe.Key = "sk_test_twice"
	stripe.DefaultLeveledLogger = &stripe.LeveledLogger{Level: stripe.LevelNull}
}

var globalJob = harness.Job{Name: "stripe-payout-global-backend", Handler: func(ctx context.Context, d *harness.Delivery) error {
	return stripepayout.GlobalJob{DB: d.DB}.WithJobKey(ctx, week42)
}}

// The job calls the package-level transfer.New on stripe-go's global
// backend and is handed no HTTP client: its calls reach the delivery's
// Stripe provider all the same (the process's default client is routed
// by the calling goroutine), each to its own delivery when two run at
// once. Verdicts as TestWithJobKey's: only the redrive past the key
// window pays twice.
func TestGlobalBackend(t *testing.T) {
	cfg := config
	cfg.ExpectFinding = "a redrive after Stripe's 24h key window pays twice"
	cfg.ExpectPattern = result.KeyWindowPassed
	res := harness.Check(t, globalJob, cfg)
	if res.Shard != nil {
		return
	}
	concurrent := 0
	for _, s := range res.Scenarios {
		if s.Fault == faults.NameConcurrentDelivery {
			concurrent++
		}
		if s.Fault != faults.NameRedrive && s.Verdict != result.Idempotent {
			t.Errorf("scenario %s (%s) = %s, want only redrives to fail", s.Fault, s.Schedule, s.Verdict)
		}
	}
	if concurrent == 0 {
		t.Errorf("no concurrent-delivery scenario ran")
	}
	if n := len(res.ReferenceEffects); n != 1 {
		t.Errorf("the clean run made %d effects, want the one transfer, seen by the provider: %v", n, res.ReferenceEffects)
	}
}

// Under concurrent delivery the global client's calls go to the calling
// delivery every time: 30 runs give one verdict per schedule, all
// idempotent.
func TestGlobalBackendConcurrentRepeats(t *testing.T) {
	harness.SkipUnlessLong(t, "runs the concurrent-delivery check 30 times")
	cfg := config
	cfg.Faults = []faults.Fault{faults.ConcurrentDelivery(), faults.ConcurrentProducerRetry()}
	var first map[string]result.Verdict
	for run := range 30 {
		res, err := harness.Run(context.Background(), globalJob, cfg)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]result.Verdict{}
		for _, s := range res.Scenarios {
			got[s.Schedule.String()] = s.Verdict
			if s.Verdict != result.Idempotent {
				t.Errorf("run %d: %s = %s, want idempotent:\n%s", run+1, s.Schedule, s.Verdict, res)
			}
		}
		_ = res.DropDatabases(context.Background())
		if first == nil {
			first = got
			continue
		}
		if len(got) != len(first) {
			t.Fatalf("run %d ran %d schedules, the first %d", run+1, len(got), len(first))
		}
		for k, v := range first {
			if got[k] != v {
				t.Errorf("run %d: %s = %s, the first run said %s", run+1, k, got[k], v)
			}
		}
	}
}
