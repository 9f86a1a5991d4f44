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
	// What the harness does at the end of a test binary; a killed binary's
	// databases go at the next run's CleanStale.
	if err := freshdb.DropAll(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}
