package pgserver

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/internal/blame"
)

// TestAutoSaysTheLocalBinariesWereMissing: with no server binaries and a
// Docker engine that cannot give the image (offline, or no such image),
// the error says the binaries were looked for and missing, then what
// Docker said, as the user's to fix, not twice's internal error (issue
// 37).
func TestAutoSaysTheLocalBinariesWereMissing(t *testing.T) {
	saved := localSearchDirs
	localSearchDirs = func() []string { return []string{t.TempDir()} }
	t.Cleanup(func() { localSearchDirs = saved })
	keepGoCache(t)
	_, err := Start(context.Background(), Config{Image: "twice-no-such-image:never"})
	require.Error(t, err)
	t.Log(err)
	if strings.Contains(err.Error(), "no PostgreSQL server: twice needs one of") {
		t.Skip("no Docker engine here: the error lists every way, local binaries included")
	}
	for _, want := range []string{
		"[twice] config: no PostgreSQL server binaries here (",
		"so twice tried Docker, and it failed: Docker image twice-no-such-image:never is not on this machine and pulling it failed",
		"Install PostgreSQL's server package",
	} {
		assert.Contains(t, blame.Message(err), want)
	}
	assert.NotContains(t, blame.Message(err), "internal")
}
