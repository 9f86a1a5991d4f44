package pgserver

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// dockerHelperPkg is the helper the Docker mode builds on demand.
const dockerHelperPkg = "github.com/runtwice/twice/cmd/twice-pgdocker"

// dockerHelperEnv names a prebuilt helper, for machines that cannot build
// one when the tests run (no go on PATH, no module downloads).
const dockerHelperEnv = "TWICE_PGDOCKER"

// progressAfter is how long a helper build runs before it reports: an
// up-to-date one takes about a second and says nothing.
const progressAfter = 2 * time.Second

var dockerHelperOut io.Writer = os.Stderr

// dockerHelper returns the path of cmd/twice-pgdocker, built with the go
// command in this test's module (the test's working directory, as go test
// sets it), so the helper has the same twice and testcontainers-go
// versions as the module's go.mod says. It is built into the user cache
// directory, one file per module, which go build leaves alone when it is
// up to date; go's build cache makes a rebuild after a change cheap. A
// lock serialises the test binaries of one go test ./... that build it.
func dockerHelper(ctx context.Context) (string, error) {
	if p := os.Getenv(dockerHelperEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("[twice] config: %s=%s: %w; unset it to let twice build the Docker helper, or go build -o %s %s", dockerHelperEnv, p, err, p, dockerHelperPkg)
		}
		return p, nil
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		// Without its helper Docker is as absent as without an engine.
		return "", unavailable("no go command on PATH to build the Docker helper %s (put go there, or build the helper yourself and set %s to it)", dockerHelperPkg, dockerHelperEnv)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("[twice] internal: working directory: %w", err)
	}
	env, err := goEnv(ctx, goCmd, wd, "GOMOD", "GOWORK", "GOOS", "GOARCH")
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	key := sha256.Sum256([]byte(strings.Join(env, "\n")))
	dir := filepath.Join(cache, "twice", "pgdocker", hex.EncodeToString(key[:8]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("[twice] internal: directory for the Docker helper: %w", err)
	}
	unlock, err := lockFile(filepath.Join(dir, "lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	out := filepath.Join(dir, "twice-pgdocker")
	args := []string{"build", "-v", "-o", out}
	gomod, gowork := env[0], env[1]
	buildErr := goBuild(ctx, goCmd, wd, append(args, dockerHelperPkg))
	if buildErr != nil && strings.Contains(buildErr.Error(), "missing go.sum entry") && (gowork == "" || gowork == "off") && gomod != "" && gomod != os.DevNull {
		// A module that requires twice has, once tidy, no go.sum lines for
		// what only the helper imports. Add them to a copy, never to the
		// module's own go.mod and go.sum.
		buildErr = goBuildWithModCopy(ctx, goCmd, wd, gomod, args)
	}
	if buildErr != nil {
		return "", buildErr
	}
	return out, nil
}

func goEnv(ctx context.Context, goCmd, wd string, names ...string) ([]string, error) {
	cmd := exec.CommandContext(ctx, goCmd, append([]string{"env"}, names...)...)
	cmd.Dir = wd
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("[twice] internal: go env in %s: %w: %s", wd, err, strings.TrimSpace(stderr.String()))
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) != len(names) {
		return nil, fmt.Errorf("[twice] internal: go env %s printed %q", strings.Join(names, " "), b)
	}
	return lines, nil
}

// goBuildWithModCopy builds with a copy of gomod and its go.sum, which
// -mod=mod may complete.
func goBuildWithModCopy(ctx context.Context, goCmd, wd, gomod string, args []string) error {
	tmp, err := os.MkdirTemp("", "twice-pgdocker-mod-")
	if err != nil {
		return fmt.Errorf("[twice] internal: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(gomod), f))
		if err != nil && (f != "go.sum" || !os.IsNotExist(err)) {
			return fmt.Errorf("[twice] internal: copy %s for the Docker helper's build: %w", f, err)
		}
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o600); err != nil {
			return fmt.Errorf("[twice] internal: %w", err)
		}
	}
	args = append(args, "-mod=mod", "-modfile="+filepath.Join(tmp, "go.mod"), dockerHelperPkg)
	return goBuild(ctx, goCmd, wd, args)
}

// goBuild runs go with args in wd. After progressAfter it reports, every
// 10 s, how many packages go has compiled (go build -v names each).
func goBuild(ctx context.Context, goCmd, wd string, args []string) error {
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = wd
	cmd.Env = filteredEnv("GOCOVERDIR", "GOFLAGS")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return fmt.Errorf("[twice] internal: %w", err)
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("[twice] internal: go build %s: %w", dockerHelperPkg, err)
	}
	var mu sync.Mutex
	var compiled int
	var msg []string
	done := make(chan struct{})
	finished := make(chan struct{})
	reported := false
	go func() {
		defer close(finished)
		t := time.NewTimer(progressAfter)
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
					_, _ = fmt.Fprintf(dockerHelperOut, "[twice] TWICE_POSTGRES=docker: building its helper %s (testcontainers-go, once per build cache): %d packages compiled\n", dockerHelperPkg, n)
				} else {
					_, _ = fmt.Fprintf(dockerHelperOut, "[twice] building the Docker helper: %d packages compiled (%s)\n", n, time.Since(began).Round(time.Second))
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
	if err != nil {
		return fmt.Errorf("[twice] config: TWICE_POSTGRES=docker needs its helper, and `cd %s && go %s` failed (%w):\n%s\nfix what go says (e.g. go mod download), or build the helper yourself and set %s to it", wd, strings.Join(args, " "), err, strings.Join(msg, "\n"), dockerHelperEnv)
	}
	if reported {
		_, _ = fmt.Fprintf(dockerHelperOut, "[twice] built the Docker helper in %s (%d packages compiled)\n", time.Since(began).Round(time.Second), compiled)
	}
	return nil
}

// lockFile takes an exclusive lock on path until the returned func runs.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("[twice] internal: lock for the Docker helper's build: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("[twice] internal: lock %s: %w", path, err)
	}
	return func() { _ = f.Close() }, nil
}
