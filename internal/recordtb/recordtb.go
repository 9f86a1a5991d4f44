// Package recordtb records what a check reports to its test instead of
// failing the test, so tests can assert the messages a finding produces.
package recordtb

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
)

// T stands in for a test. Errors, fatal errors and logs are recorded;
// everything else (Name, Context, Cleanup, TempDir) is the real test's, so
// resources are still released when the real test ends.
type T struct {
	testing.TB

	mu     sync.Mutex
	errors []string
	logs   []string
}

// New returns a recorder standing in for t.
func New(t testing.TB) *T { return &T{TB: t} }

// Errorf records a failure.
func (r *T) Errorf(format string, args ...any) { r.record(&r.errors, fmt.Sprintf(format, args...)) }

// Error records a failure.
func (r *T) Error(args ...any) { r.record(&r.errors, fmt.Sprint(args...)) }

// Fatalf records a failure and stops the goroutine, as testing.T does;
// call the code under test through Run.
func (r *T) Fatalf(format string, args ...any) {
	r.record(&r.errors, fmt.Sprintf(format, args...))
	runtime.Goexit()
}

// Fatal records a failure and stops the goroutine.
func (r *T) Fatal(args ...any) {
	r.record(&r.errors, fmt.Sprint(args...))
	runtime.Goexit()
}

// Logf records a log line.
func (r *T) Logf(format string, args ...any) { r.record(&r.logs, fmt.Sprintf(format, args...)) }

// Log records a log line.
func (r *T) Log(args ...any) { r.record(&r.logs, fmt.Sprint(args...)) }

// Run calls fn with the recorder on a goroutine of its own, so a Fatalf
// ends fn and not the real test, and waits for it.
func (r *T) Run(fn func(t testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
}

// Errors returns the recorded failures.
func (r *T) Errors() []string { return r.recorded(&r.errors) }

// Logs returns the recorded log lines.
func (r *T) Logs() []string { return r.recorded(&r.logs) }

func (r *T) record(dst *[]string, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*dst = append(*dst, msg)
}

// recorded is a copy of what record put in src.
func (r *T) recorded(src *[]string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), *src...)
}
