package checkthenact_test

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/runtwice/twice/examples/checkthenact"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

var (
	checkThenAct = harness.Job{Name: "check-then-act", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return checkthenact.CheckThenAct(ctx, d.DB, 77, 9812)
	}}
	guarded = harness.Job{Name: "guarded-for-update", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return checkthenact.GuardedForUpdate(ctx, d.DB, 77, 9812)
	}}
	twoAutocommits = harness.Job{Name: "two-autocommits", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return checkthenact.TwoAutocommits(ctx, d.DB, 77, 9812)
	}}

	config       = harness.Config{Setup: []harness.Setup{harness.SQL(checkthenact.Schema)}}
	configUnique = harness.Config{Setup: []harness.Setup{harness.SQL(checkthenact.SchemaUnique)}}
)

func TestCheckThenAct(t *testing.T) {
	cfg := config
	cfg.ExpectFinding = "two workers both see no ledger row"
	cfg.ExpectPattern = result.CheckThenAct
	harness.Check(t, checkThenAct, cfg)
}

func TestGuardedForUpdate(t *testing.T) {
	res := harness.Check(t, guarded, config)
	waits := 0
	for _, s := range res.Scenarios {
		waits += s.LockWaits
	}
	if waits == 0 {
		t.Errorf("no scenario waited on the row lock; the concurrent schedules did not overlap")
	}
}

func TestTwoAutocommits(t *testing.T) {
	cfg := configUnique
	cfg.ExpectFinding = "a crash between the ledger row and the balance loses the points"
	cfg.ExpectPattern = result.WorkLost
	harness.Check(t, twoAutocommits, cfg)
}

// failedFaults runs job once and returns the faults of its failed
// scenarios with their schedules.
func failedFaults(t *testing.T, job harness.Job, cfg harness.Config) []string {
	t.Helper()
	res, err := harness.Run(t.Context(), job, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.DropDatabases(context.Background()) })
	var out []string
	for _, s := range res.Failed() {
		out = append(out, string(s.Fault)+" "+s.Schedule.String())
	}
	return out
}

// The verdicts are exact, not lucky: the same scenarios fail on every run.
// Each check runs 20 times with the faults that decide its verdict.
func TestVerdictsAreDeterministic(t *testing.T) {
	// Long: the project's CI sets TWICE_LONG=1 and runs it once.
	if testing.Short() || os.Getenv("TWICE_LONG") != "1" {
		t.Skip("runs each check 20 times; set TWICE_LONG=1 to run it")
	}
	with := func(cfg harness.Config, fs ...faults.Fault) harness.Config {
		cfg.Faults = fs
		return cfg
	}
	tests := []struct {
		job       harness.Job
		cfg       harness.Config
		wantFault string // a fault that must be among the findings; "" for none
	}{
		{checkThenAct, with(config, faults.ConcurrentDelivery(), faults.CrashAtEveryStep()), "concurrent-delivery"},
		{guarded, with(config, faults.ConcurrentDelivery(), faults.CrashAtEveryStep()), ""},
		{twoAutocommits, with(configUnique, faults.CrashAtEveryStep(), faults.AmbiguousCommits(), faults.ConcurrentDelivery()), "crash-mid-job"},
	}
	for _, tt := range tests {
		t.Run(tt.job.Name, func(t *testing.T) {
			first := failedFaults(t, tt.job, tt.cfg)
			found := tt.wantFault == "" && len(first) == 0
			for _, f := range first {
				found = found || f[:len(tt.wantFault)] == tt.wantFault
			}
			if !found {
				t.Fatalf("findings %q, want one of fault %q", first, tt.wantFault)
			}
			for i := 2; i <= 20; i++ {
				if got := failedFaults(t, tt.job, tt.cfg); !slices.Equal(got, first) {
					t.Fatalf("run %d found %q, run 1 found %q", i, got, first)
				}
			}
		})
	}
}
