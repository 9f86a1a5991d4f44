package twofaults_test

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/runtwice/twice/examples/twofaults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

var (
	reward = harness.Job{Name: "reward-two-faults", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return twofaults.Reward(ctx, d.DB, d.JobID, d.Attempt, 77, 9812)
	}}
	// Which copy's job ID is in processed_jobs depends on which copy
	// won; only the points and the rewarded orders are the job's state.
	config = harness.Config{Setup: []harness.Setup{harness.SQL(twofaults.Schema)}, IgnoreTables: []string{"processed_jobs"}}
)

// TestRewardSurvivesEverySingleFault: the default matrix, one fault at a
// time, finds nothing.
func TestRewardSurvivesEverySingleFault(t *testing.T) {
	res := harness.Check(t, reward, config)
	if res.Shard != nil {
		return // one shard of several (-twice.shard): the scenarios below may be in another
	}
	if len(res.Scenarios) < 20 {
		t.Errorf("the default matrix ran %d scenarios; want every fault at every step", len(res.Scenarios))
	}
}

// TestRewardTwoFaults: exploration, in its default budget, finds the
// producer copy that crashes, shrinks it to that pair, and the replay line
// it prints reproduces it.
func TestRewardTwoFaults(t *testing.T) {
	cfg := config
	cfg.ExpectFinding = "a producer copy whose first delivery crashes skips the business-key check on its redelivery"
	cfg.ExpectPattern = result.IncrementWithoutRecord
	x := harness.Explore(t, reward, cfg, harness.ExploreOptions{})
	if x.Result != nil && x.Result.Shard != nil {
		return // one shard of several (-twice.shard) explores its share: the finding may be another's
	}
	if x.Replay != nil {
		return // this is the replay below, run by the printed line
	}
	const want = "j1a1w1 > j2a1w2!crash:1"
	if x.Minimal == nil || x.Minimal.String() != want {
		t.Fatalf("exploration shrank to %v, want %q (found %v after %d checks)", x.Minimal, want, x.Found, x.FoundAfter)
	}
	t.Logf("found %v after %d of %d checks (%d distinct schedules run), shrunk to %v, seed %d",
		x.Found, x.FoundAfter, x.Checks, x.Executed, x.Minimal, x.Seed)

	// The printed line runs this test with -twice.replay; run the same
	// through this test binary.
	m := regexp.MustCompile(`^go test -run '([^']+)' \S+ -twice\.replay='([^']+)'$`).FindStringSubmatch(x.ReplayLine)
	if m == nil {
		t.Fatalf("replay line %q is not go test -run '...' ./pkg -twice.replay='...'", x.ReplayLine)
	}
	if m[2] != want {
		t.Fatalf("replay line replays %q, want %q", m[2], want)
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run="+m[1], "-test.v", "-twice.replay="+m[2])
	cmd.Env = append(os.Environ(), "TWICE_REPORT_DIR=") // no records from the child
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the replay line failed: %v\n%s", err, out)
	}
	for _, s := range []string{"[twice] expected finding", "the replayed schedule " + want + " fails", `table "customers" after replay mismatch`} {
		if !strings.Contains(string(out), s) {
			t.Errorf("the replay's output lacks %q:\n%s", s, out)
		}
	}
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(m.Run())
}
