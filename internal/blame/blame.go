// Package blame tells whose code an error that stops a check comes from:
// the user's (a handler that fails on its clean run, a setup step that
// fails, a worker factory that panics, input that means nothing) or
// twice's own. Only twice's own breakage is "internal"; the user's is
// reported as theirs, with the job and the delivery or step it came from.
package blame

import "errors"

// userError marks err as the user's.
type userError struct{ err error }

func (e userError) Error() string { return e.err.Error() }
func (e userError) Unwrap() error { return e.err }

// User marks err as caused by the user's code or configuration; nil stays
// nil.
func User(err error) error {
	if err == nil || IsUser(err) {
		return err
	}
	return userError{err}
}

// IsUser reports whether err, or an error it wraps, was marked by User.
func IsUser(err error) bool {
	var u userError
	return errors.As(err, &u)
}
