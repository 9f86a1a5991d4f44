package blame_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/runtwice/twice/internal/blame"
)

func TestUser(t *testing.T) {
	if blame.User(nil) != nil {
		t.Error("User(nil) is not nil")
	}
	base := errors.New("[twice] setup step x failed: boom")
	err := blame.User(base)
	if err.Error() != base.Error() || !errors.Is(err, base) {
		t.Errorf("User(err) = %v, want the same message, unwrapping to err", err)
	}
	for name, e := range map[string]error{
		"wrapped": fmt.Errorf("context: %w", err),
		"joined":  errors.Join(errors.New("drop failed"), err),
	} {
		if !blame.IsUser(e) {
			t.Errorf("IsUser(%s) = false", name)
		}
	}
	if blame.IsUser(base) {
		t.Error("IsUser of an unmarked error = true")
	}
}

// Message adds the tag once and the label of whose fault the error is,
// read from its kind, never from its text.
func TestMessage(t *testing.T) {
	userErr := blame.Userf("job %q has neither Handler nor NewWorker; set one", "x")
	tests := []struct {
		name string
		err  error
		kind blame.Kind
		want string
	}{
		{"unmarked is twice's own", fmt.Errorf("creating database %s: %w", "d", errors.New("boom")), blame.KindInternal,
			"[twice] internal: creating database d: boom"},
		{"the user's", userErr, blame.KindUser,
			`[twice] job "x" has neither Handler nor NewWorker; set one`},
		{"the user's environment", blame.Configf("TWICE_POSTGRES=%q is not a way to get PostgreSQL", "x"), blame.KindConfig,
			`[twice] config: TWICE_POSTGRES="x" is not a way to get PostgreSQL`},
		{"wrapped keeps its kind", fmt.Errorf("context: %w", userErr), blame.KindUser,
			`[twice] context: job "x" has neither Handler nor NewWorker; set one`},
		{"joined keeps its kind", errors.Join(userErr, errors.New("and another")), blame.KindUser,
			"[twice] job \"x\" has neither Handler nor NewWorker; set one\nand another"},
		{"the outermost mark wins", blame.AsInternal(fmt.Errorf("the server went away during the clean run (%w)", userErr)), blame.KindInternal,
			`[twice] internal: the server went away during the clean run (job "x" has neither Handler nor NewWorker; set one)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := blame.Of(tt.err); got != tt.kind {
				t.Errorf("Of = %v, want %v", got, tt.kind)
			}
			got := blame.Message(tt.err)
			if got != tt.want {
				t.Errorf("Message = %q, want %q", got, tt.want)
			}
			if n := strings.Count(got, blame.Tag); n != 1 {
				t.Errorf("Message carries the tag %d times: %q", n, got)
			}
			if text := blame.Text(tt.err); blame.Tag+" "+text != got {
				t.Errorf("Text = %q, want Message without its tag", text)
			}
		})
	}
	if got, want := blame.Line("ok: job %q", "x"), `[twice] ok: job "x"`; got != want {
		t.Errorf("Line = %q, want %q", got, want)
	}
	if blame.Userf("x") == nil || blame.AsInternal(nil) != nil || blame.User(nil) != nil {
		t.Error("marking nil gives nil, and Userf never does")
	}
}
