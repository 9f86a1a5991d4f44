package examples_test

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/runtwice/twice/harness"
)

// quietRepeats is how many times each correct job's check runs.
const quietRepeats = 30

// correctJobChecks are the tests of this module's examples that check a
// correct job (no Config.ExpectFinding), by package. A check whose
// finding did not reproduce fails as flaky (harness's confirm.go), so a
// run that passes is a run with no false alarm, confirmed or not.
var correctJobChecks = map[string][]string{
	"bounces":       {"TestRecordUnique"},
	"chargetimeout": {"TestRetryTimeouts"},
	"checkthenact":  {"TestGuardedForUpdate"},
	"loyalty":       {"TestRewardWithLedger", "TestRewardByRecompute"},
	"orderstatus":   {"TestMarkShipped"},
	"payouts":       {"TestWithJobKeyAtAProviderWithAWeeksWindow"},
	"processedjobs": {"TestByBusinessKey", "TestByJobIDSurvivesRedelivery"},
	"receipts":      {"TestSendThenMark"},
	"twofaults":     {"TestRewardSurvivesEverySingleFault"},
	"webhooks":      {"TestNotify", "TestVolatileBodyField"},
	"welcomemail":   {"TestSendOnce", "TestSendOnceCrashAfterSend"},
}

// Every correct job in examples/ stays quiet across 30 repeats of its
// check: no finding, no flaky verdict (issue 27). The checks run in a
// child go test, -count=30, the packages side by side as go test runs
// them, under -race when this test is.
func TestCorrectJobsStayQuiet(t *testing.T) {
	harness.SkipUnlessLong(t, "runs every correct example's check 30 times")
	var names, pkgs []string
	for pkg, tests := range correctJobChecks {
		pkgs = append(pkgs, "./"+pkg)
		names = append(names, tests...)
	}
	run := "^(" + strings.Join(names, "|") + ")$"
	var race []string
	if raceEnabled {
		race = []string{"-race"}
	}
	// Every listed test exists: a renamed one would match nothing and pass.
	list, err := exec.CommandContext(t.Context(), "go", append(append([]string{"test", "-list", run}, race...), pkgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go test -list: %v\n%s", err, list)
	}
	for _, name := range names {
		if !strings.Contains(string(list), name+"\n") {
			t.Errorf("test %s is listed in correctJobChecks but no package has it", name)
		}
	}
	// go test's default 10m timeout is per package binary: 30 repeats of
	// a package's checks may take longer on a loaded machine, and this
	// test's own -timeout bounds the whole.
	args := append(append([]string{"test", "-timeout=0", "-count=" + strconv.Itoa(quietRepeats), "-run", run}, race...), pkgs...)
	cmd := exec.CommandContext(t.Context(), "go", args...)
	// No records from the child, and none of its own long tests.
	cmd.Env = append(os.Environ(), "TWICE_REPORT_DIR=", harness.LongEnv+"=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("%d checks of %d packages, %d times each", len(names), len(pkgs), quietRepeats)
}
