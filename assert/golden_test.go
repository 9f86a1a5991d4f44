package assert_test

import (
	"fmt"
	"testing"

	"github.com/runtwice/twice/internal/golden"
)

// goldenText compares got with testdata/<name>.golden; go test -update
// rewrites it.
func goldenText(t *testing.T, name, got string) {
	t.Helper()
	golden.Equal(t, name+".golden", got)
}

// recordingT is a TestingT that keeps what a test would have printed and
// counts Helper calls.
type recordingT struct {
	helpers int
	errors  []string
}

func (r *recordingT) Helper() { r.helpers++ }

func (r *recordingT) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
