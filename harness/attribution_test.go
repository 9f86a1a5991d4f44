package harness_test

import (
	"fmt"
	"os"
	osexec "os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/internal/pgserver"
)

const attributionEnv = "TWICE_HARNESS_TEST_ATTRIBUTION"

// checkLine is the line of the Check call in TestHelperAttribution, which
// every line twice prints about that check must point at; see init.
var checkLine int

// Every line a failed Check prints, the finding and the kept database
// logged from its cleanup, is attributed to the user's Check call, not to
// a line inside twice. A child process runs the failing check under -v.
func TestMessagesPointAtTheUsersCheck(t *testing.T) {
	// The child keeps its database as evidence; on a private server it
	// goes with the server instead of outliving the test on a shared one.
	srv, err := pgserver.Start(t.Context(), pgserver.Config{Mode: pgserver.ModeLocal})
	if err != nil {
		t.Skipf("no private local server: %v", err)
	}
	defer srv.Close()
	cmd := osexec.Command(os.Args[0], "-test.run=^TestHelperAttribution$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), attributionEnv+"=1", "TWICE_POSTGRES=url", "TWICE_DATABASE_URL="+srv.ConnString(""))
	out, _ := cmd.CombinedOutput() // the helper's test fails by design
	text := string(out)
	t.Logf("helper output:\n%s", text)
	require.Contains(t, text, "[twice] not idempotent", "the helper's check found nothing")
	require.Contains(t, text, "as evidence", "the helper's check kept no database")

	// go test prefixes each message with the file:line of the frame that
	// logged it, after skipping frames marked Helper.
	want := fmt.Sprintf("attribution_test.go:%d: ", checkLine)
	prefix := regexp.MustCompile(`^\s+(\S+\.go:\d+): \[twice\]`)
	var seen int
	for _, line := range strings.Split(text, "\n") {
		m := prefix.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		seen++
		assert.Equal(t, strings.TrimSuffix(want, ": "), m[1], "attributed elsewhere: %s", line)
	}
	assert.GreaterOrEqual(t, seen, 2, "the finding and the kept database line")
}

func TestHelperAttribution(t *testing.T) {
	if os.Getenv(attributionEnv) == "" {
		t.Skip("helper for TestMessagesPointAtTheUsersCheck")
	}
	job := harness.Job{Name: "hit", Handler: exec(`UPDATE counters SET n = n + 1`)}
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.RunTwice()}
	harness.Check(t, job, cfg) // the attributed line
}

// init finds the Check call's line in this file, so lines above it can
// change without the test changing.
func init() {
	_, file, _, _ := runtime.Caller(0)
	src, err := os.ReadFile(file)
	if err != nil {
		return
	}
	for i, line := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "harness.Check(t, job, cfg)") {
			checkLine = i + 1
			return
		}
	}
}
