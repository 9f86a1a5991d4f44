package harness

import "time"

// SetVerbose makes checks log as under go test -v, progress every every;
// the returned func restores the defaults.
func SetVerbose(every time.Duration) (restore func()) {
	v, e := verbose, progressEvery
	verbose, progressEvery = func() bool { return true }, every
	return func() { verbose, progressEvery = v, e }
}
