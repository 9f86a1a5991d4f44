// Package longtest gates the project's own slow tests: repetitions that prove
// determinism and the end-to-end report over every example. Plain `go test
// ./...` skips them so a fresh clone's test run stays short; CI sets
// TWICE_LONG=1 and runs them once.
package longtest

import (
	"os"
	"testing"
)

// Env is the environment variable that turns the long tests on ("1").
const Env = "TWICE_LONG"

// Enabled reports whether long tests run: TWICE_LONG=1 and not -short.
func Enabled() bool {
	return os.Getenv(Env) == "1" && !testing.Short()
}

// Skip skips t unless long tests are enabled; why says what makes it long.
func Skip(t testing.TB, why string) {
	t.Helper()
	if !Enabled() {
		t.Skipf("long test (%s): set %s=1 to run it", why, Env)
	}
}
