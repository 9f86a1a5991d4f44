package harness_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/internal/pgserver"
)

const serverGoneEnv = "TWICE_HARNESS_TEST_SERVER_GONE"

// TestServerGoneIsNotTheJob: when the server stops while the clean
// reference run goes on, the check says the server went away, not that
// the job failed. A child process checks a job on a private server, which
// this test stops once the handler is in the middle of its delivery.
func TestServerGoneIsNotTheJob(t *testing.T) {
	if os.Getenv("TWICE_POSTGRES") != "" && os.Getenv("TWICE_POSTGRES") != pgserver.ModeLocal {
		t.Skip("needs local server binaries for a private server")
	}
	srv, err := pgserver.Start(t.Context(), pgserver.Config{Mode: pgserver.ModeLocal})
	if err != nil {
		t.Skipf("no private local server: %v", err)
	}
	defer srv.Close()

	cmd := osexec.Command(os.Args[0], "-test.run=^TestHelperServerGone$", "-test.v")
	cmd.Env = append(os.Environ(), serverGoneEnv+"=1", "TWICE_POSTGRES=url", "TWICE_DATABASE_URL="+srv.ConnString(""))
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	stopped := false
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		// The two clean references may run at once: the first handler
		// to get here stops the server for both.
		if sc.Text() == "IN HANDLER" && !stopped {
			stopped = true
			require.NoError(t, srv.Close())
			require.NoError(t, stdin.Close())
		}
	}
	_ = cmd.Wait()
	t.Logf("helper output:\n%s", out.String())
	assert.Contains(t, out.String(), "IN HANDLER", "the handler never ran")
	// The handler's next statement finds the server gone, or, while it
	// still waits, the executor does when it asks about locks.
	assert.Contains(t, out.String(), `[twice] internal: the PostgreSQL server went away`)
	assert.NotContains(t, out.String(), "failed on its clean reference run")
}

func TestHelperServerGone(t *testing.T) {
	if os.Getenv(serverGoneEnv) == "" {
		t.Skip("helper for TestServerGoneIsNotTheJob")
	}
	harness.Check(t, harness.Job{Name: "gone", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if _, err := d.DB.Exec(ctx, `SELECT 1`); err != nil {
			return err
		}
		fmt.Println("IN HANDLER")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // the parent stops the server, then closes stdin
		_, err := d.DB.Exec(ctx, `SELECT 2`)
		return err
	}}, harness.Config{})
}
