package drivers_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// quietRepeats is how many times each driver's correct job is checked.
const quietRepeats = 30

// The correct job (the order rewarded once, through its ledger row) stays
// quiet through every driver across 30 checks: no finding, no flaky
// verdict (issue 27). examples/quiet_test.go repeats the root module's
// examples; this module is tested on its own.
func TestCorrectJobStaysQuiet(t *testing.T) {
	harness.SkipUnlessLong(t, "checks each driver's correct job 30 times")
	for _, row := range matrix {
		t.Run(row.name, func(t *testing.T) {
			for i := 1; i <= quietRepeats; i++ {
				res, err := harness.Run(context.Background(), harness.Job{Name: row.name + "-with-ledger", Handler: row.withLedger}, config)
				require.NoError(t, err, "run %d", i)
				require.NotEmpty(t, res.Scenarios)
				for _, s := range res.Scenarios {
					require.Equal(t, result.Idempotent, s.Verdict, "run %d: %s: %v", i, s.Schedule, s.Problems)
				}
				require.NoError(t, res.DropDatabases(context.Background()))
			}
		})
	}
}
