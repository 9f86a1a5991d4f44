package pgserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/runtwice/twice/internal/gobuild"
)

// dockerHelperPkg is the helper the Docker mode builds on demand.
const dockerHelperPkg = "github.com/runtwice/twice/cmd/twice-pgdocker"

// dockerHelperEnv names a prebuilt helper, for machines that cannot build
// one when the tests run (no go on PATH, no module downloads).
const dockerHelperEnv = "TWICE_PGDOCKER"

var dockerHelperOut io.Writer = os.Stderr

// dockerHelper returns the path of cmd/twice-pgdocker, built with the go
// command in this test's module (the test's working directory, as go test
// sets it), so the helper has the same twice and testcontainers-go
// versions as the module's go.mod says (see internal/gobuild).
func dockerHelper(ctx context.Context) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	h := gobuild.Helper{
		Pkg:      dockerHelperPkg,
		Name:     "twice-pgdocker",
		Env:      dockerHelperEnv,
		What:     "the Docker helper",
		Need:     "TWICE_POSTGRES=docker needs its helper",
		Building: "TWICE_POSTGRES=docker: building its helper " + dockerHelperPkg + " (testcontainers-go, once per build cache)",
		Progress: dockerHelperOut,
	}
	path, err := h.Path(ctx, wd)
	if errors.Is(err, gobuild.ErrNoGo) {
		// Without its helper Docker is as absent as without an engine.
		return "", unavailable("no go command on PATH to build the Docker helper %s (put go there, or build the helper yourself and set %s to it)", dockerHelperPkg, dockerHelperEnv)
	}
	return path, err
}
