package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/cmd/twice/internal/about"
)

// Besides its tests, this test binary plays the launcher (launcherEnv)
// and a stand-in twice-core (fakeCoreEnv) that says what it got, so a
// test can see what the launcher passes on.
const (
	launcherEnv = "TWICE_TEST_LAUNCHER"
	fakeCoreEnv = "TWICE_TEST_FAKE_CORE"
	readyEnv    = "TWICE_TEST_READY"
)

func TestMain(m *testing.M) {
	if os.Getenv(launcherEnv) == "1" {
		// Its twice-core, this binary again, is to be the stand-in.
		_ = os.Unsetenv(launcherEnv)
		os.Exit(launch(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	switch os.Getenv(fakeCoreEnv) {
	case "echo":
		in, _ := io.ReadAll(os.Stdin)
		fmt.Printf("args=%q stdin=%q\n", os.Args[1:], in)
		fmt.Fprintln(os.Stderr, "to stderr")
		os.Exit(3)
	case "wait":
		waitForSignal()
	case "command":
		fmt.Println(os.Getenv(about.CommandEnv))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// waitForSignal is a twice-core that waits for a signal and exits 7 saying
// which, and in which process group it ran.
func waitForSignal() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	pgid, _ := syscall.Getpgid(0)
	if err := os.WriteFile(os.Getenv(readyEnv), []byte(fmt.Sprint(pgid)), 0o600); err != nil {
		os.Exit(1)
	}
	sig := <-sigs
	fmt.Printf("got %s\n", sig)
	os.Exit(7)
}

// TestLaunchPassesThrough: twice-core gets the arguments and the
// streams, and its exit code is the launcher's.
func TestLaunchPassesThrough(t *testing.T) {
	t.Setenv(coreEnv, os.Args[0])
	t.Setenv(fakeCoreEnv, "echo")
	var stdout, stderr bytes.Buffer
	code := launch([]string{"report", "-o", "dir with space", "./..."}, strings.NewReader("input"), &stdout, &stderr)
	assert.Equal(t, 3, code)
	assert.Equal(t, `args=["report" "-o" "dir with space" "./..."] stdin="input"`+"\n", stdout.String())
	assert.Equal(t, "to stderr\n", stderr.String())
}

// TestLaunchTellsHowTwiceRuns: twice-core learns how the user ran twice,
// for the replay lines it prints.
func TestLaunchTellsHowTwiceRuns(t *testing.T) {
	t.Setenv(coreEnv, os.Args[0])
	t.Setenv(fakeCoreEnv, "command")
	var stdout, stderr bytes.Buffer
	code := launch([]string{"report"}, strings.NewReader(""), &stdout, &stderr)
	assert.Equal(t, 0, code, stderr.String())
	assert.Equal(t, about.Invocation(os.Args[0], "")+"\n", stdout.String())
}

// TestLaunchMissingCore: a $TWICE_CORE that names nothing is a config
// error that says how to fix it, and nothing runs.
func TestLaunchMissingCore(t *testing.T) {
	t.Setenv(coreEnv, "/nonexistent/twice-core")
	var stdout, stderr bytes.Buffer
	code := launch([]string{"report"}, strings.NewReader(""), &stdout, &stderr)
	assert.Equal(t, 2, code)
	assert.Empty(t, stdout.String())
	assert.Contains(t, stderr.String(), "[twice] config: TWICE_CORE=/nonexistent/twice-core: ")
	assert.Contains(t, stderr.String(), "go build -o /nonexistent/twice-core "+corePkg)
}

// TestLaunchForwardsSignal: SIGTERM to the launcher reaches twice-core,
// which runs in a process group of its own (so a terminal's ^C reaches it
// once, through the launcher), and its exit code is the launcher's.
func TestLaunchForwardsSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			ready := filepath.Join(t.TempDir(), "ready")
			cmd := exec.Command(os.Args[0], "report")
			cmd.Env = append(os.Environ(), launcherEnv+"=1", coreEnv+"="+os.Args[0], fakeCoreEnv+"=wait", readyEnv+"="+ready)
			var stdout bytes.Buffer
			cmd.Stdout = &stdout
			require.NoError(t, cmd.Start())
			corePgid := waitFile(t, ready)
			launcherPgid, err := syscall.Getpgid(cmd.Process.Pid)
			require.NoError(t, err)
			assert.NotEqual(t, fmt.Sprint(launcherPgid), corePgid, "twice-core runs in the launcher's process group")
			require.NoError(t, cmd.Process.Signal(sig))
			err = cmd.Wait()
			var exit *exec.ExitError
			require.True(t, errors.As(err, &exit), "the launcher exits with twice-core's code: %v", err)
			assert.Equal(t, 7, exit.ExitCode())
			assert.Equal(t, "got "+sig.String()+"\n", stdout.String())
		})
	}
}

// TestLaunchBuildsCore: with no $TWICE_CORE the launcher builds
// twice-core in the module it runs in and runs it.
func TestLaunchBuildsCore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds twice-core: seconds")
	}
	keepGoCache(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv(coreEnv, "")
	var stdout, stderr bytes.Buffer
	// twice-core, not the launcher, answers this one.
	code := launch([]string{"report", "-merge"}, strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, 2, code, stderr.String())
	assert.Contains(t, stderr.String(), "[twice] -merge needs the report.json of every shard")
	built, err := filepath.Glob(filepath.Join(os.Getenv("XDG_CACHE_HOME"), "twice", "twice-core", "*", "twice-core"))
	require.NoError(t, err)
	assert.Len(t, built, 1, "one twice-core, in the user cache directory")
}

// TestLaunchOutsideTwice: in a module that does not require twice there
// is no twice-core to build; the error says so and how to go on.
func TestLaunchOutsideTwice(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/notwice\n\ngo 1.26.0\n"), 0o600))
	t.Chdir(dir)
	keepGoCache(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv(coreEnv, "")
	t.Setenv("GOPROXY", "off")
	var stdout, stderr bytes.Buffer
	code := launch([]string{"report"}, strings.NewReader(""), &stdout, &stderr)
	assert.Equal(t, 2, code)
	assert.Empty(t, stdout.String())
	for _, want := range []string{
		"[twice] config: twice runs " + corePkg + ", built in the module it runs in (one that requires github.com/runtwice/twice), and `cd " + dir + " && go build",
		"set TWICE_CORE to it",
	} {
		assert.Contains(t, stderr.String(), want)
	}
}

// TestLaunchHelpAndVersionOutsideAModule: twice help and twice version
// answer without building twice-core, so outside any module they print
// the usage and the version, not a build error (issue 37).
func TestLaunchHelpAndVersionOutsideAModule(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv(coreEnv, "/nonexistent/twice-core") // built or run, it would fail
	t.Setenv("GOFLAGS", "")
	for _, tt := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{name: "help", args: []string{"help"}, want: "twice report [-o DIR]"},
		{name: "-h", args: []string{"-h"}, want: "twice version"},
		{name: "version", args: []string{"version"}, want: "twice "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := launch(tt.args, strings.NewReader(""), &stdout, &stderr)
			assert.Equal(t, tt.code, code)
			assert.True(t, strings.HasPrefix(stdout.String(), tt.want) || strings.Contains(stdout.String(), tt.want), "stdout %q lacks %q", stdout.String(), tt.want)
			assert.Empty(t, stderr.String())
		})
	}
}

// waitFile waits for path to be written and returns what it holds.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	for range 600 {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return string(b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s was not written in 30 s", path)
	return ""
}

// keepGoCache pins go's build cache where it is, so a test that moves the
// user cache directory (where twice-core goes) does not build cold.
func keepGoCache(t *testing.T) {
	t.Helper()
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	require.NoError(t, err)
	t.Setenv("GOCACHE", strings.TrimSpace(string(out)))
}
