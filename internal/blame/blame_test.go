package blame_test

import (
	"errors"
	"fmt"
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
