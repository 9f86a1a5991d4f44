// Package blame tells whose fault an error that stops a check is, and
// is the one place that turns such an error into the message a user
// reads.
//
// Whose fault is a value, not text: an error is the user's (a handler that
// fails on its clean run, a setup step that fails, input that means
// nothing: User, Userf), the user's environment's (no PostgreSQL, a bad
// TWICE_* variable: Configf), or, unmarked, twice's own. Errors
// below the edges are plain Go errors, "context: %w", with no tag and no
// label. Where a message reaches the user (harness's testing.TB wrapper,
// internal/render, the twice command's output) Message adds the "[twice]"
// tag once and the label of whose fault it is ("internal: ", "config: ",
// none for the user's); Line tags a line that is no error (a log line, a
// finding's headline).
package blame

import (
	"errors"
	"fmt"
)

// Tag starts every message twice shows a user.
const Tag = "[twice]"

// Kind is whose fault an error is.
type Kind int

const (
	// KindInternal is twice's own breakage, and the kind of every error
	// not marked otherwise: it says nothing of the job.
	KindInternal Kind = iota
	// KindUser is the user's code or input (User, Userf): a handler or a
	// setup step that fails, a flag or a Config that means nothing.
	KindUser
	// KindConfig is the user's environment (Configf): no PostgreSQL, a
	// TWICE_* variable that points nowhere.
	KindConfig
)

// Label is what a message says of its kind after the tag: "internal: ",
// "config: ", or nothing for the user's own.
func (k Kind) Label() string {
	switch k {
	case KindUser:
		return ""
	case KindConfig:
		return "config: "
	default:
		return "internal: "
	}
}

// marked is err with whose fault it is.
type marked struct {
	kind Kind
	err  error
}

func (e marked) Error() string { return e.err.Error() }
func (e marked) Unwrap() error { return e.err }

// mark gives err kind k, unless err is nil or already says whose it is
// at its outermost mark.
func mark(k Kind, err error) error {
	if err == nil {
		return nil
	}
	var m marked
	if errors.As(err, &m) && m.kind == k {
		return err
	}
	return marked{k, err}
}

// User marks err as caused by the user's code or configuration; nil stays
// nil.
func User(err error) error { return mark(KindUser, err) }

// Userf is User(fmt.Errorf(format, args...)).
func Userf(format string, args ...any) error {
	return mark(KindUser, fmt.Errorf(format, args...))
}

// Configf is an error of the user's environment: fmt.Errorf(format,
// args...) marked Config.
func Configf(format string, args ...any) error {
	return mark(KindConfig, fmt.Errorf(format, args...))
}

// AsInternal marks err as twice's own even where it wraps an error marked
// otherwise (the server went away while a handler failed: the handler's
// error says nothing of the job); nil stays nil.
func AsInternal(err error) error { return mark(KindInternal, err) }

// Of is whose fault err is: the kind of its outermost mark, or
// KindInternal when nothing marked it.
func Of(err error) Kind {
	var m marked
	if errors.As(err, &m) {
		return m.kind
	}
	return KindInternal
}

// IsUser reports whether err is the user's: Of(err) == User.
func IsUser(err error) bool { return Of(err) == KindUser }

// Text is err as a message says it after the tag: its label, then its
// text ("internal: creating database x: ..."). The twice runner keeps
// it in a check's record and tags it where it prints it.
func Text(err error) string {
	return Of(err).Label() + err.Error()
}

// Message is err as the user reads it: the tag, the label of whose fault
// it is, then its text.
func Message(err error) string {
	return Tag + " " + Of(err).Label() + err.Error()
}

// Line is a tagged line: "[twice] " and the formatted text.
func Line(format string, args ...any) string {
	return Tag + " " + fmt.Sprintf(format, args...)
}
