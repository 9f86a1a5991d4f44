package about_test

import (
	"testing"

	"github.com/runtwice/twice/cmd/twice/internal/about"
)

// TestInvocation: the replay lines twice prints name twice as the user
// ran it, so they work when pasted (issue 37).
func TestInvocation(t *testing.T) {
	const pkg = "github.com/runtwice/twice/cmd/twice"
	for _, tt := range []struct{ name, arg0, want string }{
		{name: "go run", arg0: "/tmp/go-build2631/b001/exe/twice", want: "go run " + pkg},
		{name: "go run with GOTMPDIR", arg0: "/home/u/.cache/tmp/go-build99/b001/exe/twice", want: "go run " + pkg},
		{name: "on PATH", arg0: "twice", want: "twice"},
		{name: "by its path", arg0: "./bin/twice", want: "./bin/twice"},
		{name: "a test binary", arg0: "/tmp/go-build1/b001/twice.test", want: "/tmp/go-build1/b001/twice.test"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := about.Invocation(tt.arg0, pkg); got != tt.want {
				t.Errorf("Invocation(%q) = %q, want %q", tt.arg0, got, tt.want)
			}
		})
	}
}

func TestCommand(t *testing.T) {
	t.Setenv(about.CommandEnv, "")
	if got := about.Command(); got != "twice" {
		t.Errorf("Command() = %q without %s, want twice", got, about.CommandEnv)
	}
	t.Setenv(about.CommandEnv, "go run ./cmd/twice")
	if got := about.Command(); got != "go run ./cmd/twice" {
		t.Errorf("Command() = %q, want go run ./cmd/twice", got)
	}
}
