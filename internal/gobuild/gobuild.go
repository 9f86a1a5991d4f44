// Package gobuild builds one of twice's helper commands on demand: with
// the go command, in the module at hand, into the user cache directory.
// What a helper imports is then compiled only when it is used, and with
// the versions the module's go.mod says. The Docker mode's helper
// (cmd/twice-pgdocker, testcontainers-go) and the twice command proper
// (cmd/twice/twice-core, which cmd/twice runs) are built this way.
package gobuild

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/runtwice/twice/internal/blame"
)

// ProgressAfter is how long a build runs before it reports: an
// up-to-date one takes about a second and says nothing.
const ProgressAfter = 2 * time.Second

// ErrNoGo is returned when there is no go command on PATH to build with.
var ErrNoGo = errors.New("no go command on PATH")

// Helper is a command built on demand.
type Helper struct {
	Pkg  string // the main package's import path
	Name string // the binary's file name, and its cache directory's
	Env  string // the environment variable naming a prebuilt binary instead
	// What is the helper as messages name it: "the Docker helper".
	What string
	// Need says who needs it, to begin the error of a failed build:
	// "TWICE_POSTGRES=docker needs its helper".
	Need string
	// Building begins the first progress line: "TWICE_POSTGRES=docker:
	// building its helper ... (testcontainers-go, once per build cache)".
	Building string
	// Progress receives the progress lines (after After, then every 10
	// s, and one when the build ends).
	Progress io.Writer
	// After is how long the build runs before it reports; zero is
	// ProgressAfter.
	After time.Duration
}

// Path returns the path of h's binary: the one $Env names, if set, or
// one built with the go command in dir's module, into the user cache
// directory, one file per module (go build leaves it alone when it is up
// to date; go's build cache makes a rebuild after a change cheap). A lock
// serialises the processes that build it at once.
func (h Helper) Path(ctx context.Context, dir string) (string, error) {
	if p := os.Getenv(h.Env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", blame.Configf("%s=%s: %w; unset it to let twice build %s, or go build -o %s %s", h.Env, p, err, h.What, p, h.Pkg)
		}
		return p, nil
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", ErrNoGo
	}
	env, err := goEnv(ctx, goCmd, dir, "GOMOD", "GOWORK", "GOOS", "GOARCH")
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	// One binary per module and platform: a name, not a secret.
	key := fnv.New64a()
	_, _ = key.Write([]byte(strings.Join(env, "\n")))
	out := filepath.Join(cache, "twice", h.Name, fmt.Sprintf("%016x", key.Sum64()), h.Name)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", fmt.Errorf("directory for %s: %w", h.What, err)
	}
	unlock, err := h.lock(filepath.Join(filepath.Dir(out), "lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	args := []string{"build", "-v", "-o", out}
	gomod, gowork := env[0], env[1]
	buildErr := h.build(ctx, goCmd, dir, append(args, h.Pkg))
	if buildErr != nil && strings.Contains(buildErr.Error(), "missing go.sum entry") && (gowork == "" || gowork == "off") && gomod != "" && gomod != os.DevNull {
		// A module that requires twice has, once tidy, no go.sum lines for
		// what only the helper imports. Add them to a copy, never to the
		// module's own go.mod and go.sum.
		buildErr = h.buildWithModCopy(ctx, goCmd, dir, gomod, args)
	}
	if buildErr != nil {
		return "", buildErr
	}
	return out, nil
}

func goEnv(ctx context.Context, goCmd, dir string, names ...string) ([]string, error) {
	cmd := exec.CommandContext(ctx, goCmd, append([]string{"env"}, names...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go env in %s: %w: %s", dir, err, strings.TrimSpace(stderr.String()))
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) != len(names) {
		return nil, fmt.Errorf("go env %s printed %q", strings.Join(names, " "), b)
	}
	return lines, nil
}

// buildWithModCopy builds with a copy of gomod and its go.sum, which
// -mod=mod may complete.
func (h Helper) buildWithModCopy(ctx context.Context, goCmd, dir, gomod string, args []string) error {
	tmp, err := os.MkdirTemp("", h.Name+"-mod-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(gomod), f))
		if err != nil && (f != "go.sum" || !os.IsNotExist(err)) {
			return fmt.Errorf("copy %s for the build of %s: %w", f, h.What, err)
		}
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o600); err != nil {
			return err
		}
	}
	args = append(args, "-mod=mod", "-modfile="+filepath.Join(tmp, "go.mod"), h.Pkg)
	return h.build(ctx, goCmd, dir, args)
}

// build runs go with args in dir. After ProgressAfter it reports, every
// 10 s, how many packages go has compiled (go build -v names each).
func (h Helper) build(ctx context.Context, goCmd, dir string, args []string) error {
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = dir
	cmd.Env = buildEnv()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("go build %s: %w", h.Pkg, err)
	}
	var mu sync.Mutex
	var compiled int
	var msg []string
	done := make(chan struct{})
	finished := make(chan struct{})
	reported := false
	go func() {
		defer close(finished)
		after := h.After
		if after == 0 {
			after = ProgressAfter
		}
		t := time.NewTimer(after)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				mu.Lock()
				n := compiled
				mu.Unlock()
				if !reported {
					_, _ = fmt.Fprintln(h.Progress, blame.Line("%s: %d packages compiled", h.Building, n))
				} else {
					_, _ = fmt.Fprintln(h.Progress, blame.Line("building %s: %d packages compiled (%s)", h.What, n, time.Since(began).Round(time.Second)))
				}
				reported = true
				t.Reset(10 * time.Second)
			}
		}
	}()
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		mu.Lock()
		// -v prints import paths; anything else is go's own message.
		if strings.ContainsAny(line, " :") {
			msg = append(msg, line)
		} else {
			compiled++
		}
		mu.Unlock()
	}
	err = cmd.Wait()
	close(done)
	<-finished
	if ctx.Err() != nil {
		return blame.Userf("building %s stopped: %w", h.What, context.Cause(ctx))
	}
	if err != nil {
		return blame.Configf("%s, and `cd %s && go %s` failed (%w):\n%s\nfix what go says (e.g. go mod download), or build %s yourself and set %s to it", h.Need, dir, strings.Join(args, " "), err, strings.Join(msg, "\n"), h.What, h.Env)
	}
	if reported {
		_, _ = fmt.Fprintln(h.Progress, blame.Line("built %s in %s (%d packages compiled)", h.What, time.Since(began).Round(time.Second), compiled))
	}
	return nil
}

// buildEnv is this process's environment without what would change the
// build: a coverage directory (go test -cover sets it) and GOFLAGS.
func buildEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GOCOVERDIR=") || strings.HasPrefix(kv, "GOFLAGS=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// lock takes an exclusive lock on path until the returned func runs.
func (h Helper) lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock for the build of %s: %w", h.What, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { _ = f.Close() }, nil
}
