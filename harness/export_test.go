package harness

import (
	"time"

	"github.com/runtwice/twice/internal/execute"
)

// SetVerbose makes checks log as under go test -v, progress every every;
// the returned func restores the defaults.
func SetVerbose(every time.Duration) (restore func()) {
	v, e := verbose, progressEvery
	verbose, progressEvery = func() bool { return true }, every
	return func() { verbose, progressEvery = v, e }
}

// BackendCounts are the server backends the deliveries' proxies started
// and the connections deliveries made, so far in this process.
func BackendCounts() (started, connects int64) {
	return execute.BackendCounts()
}
