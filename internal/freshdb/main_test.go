package freshdb_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/runtwice/twice/internal/freshdb"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if os.Getenv(helperEnv) != "" {
		// TestHelperURLRun plays a binary without this TestMain: its
		// Server's watchdog must drop its databases.
		os.Exit(code)
	}
	// What the harness does at the end of a test binary; without it, a
	// pgserver.Server drops the run's databases once the process exits.
	if err := freshdb.DropAll(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}
