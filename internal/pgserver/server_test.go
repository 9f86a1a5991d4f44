package pgserver

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/owner"
)

// Env vars of the tests that need something this package cannot make:
const (
	testURLEnv   = "TWICE_TEST_DATABASE_URL"    // an existing server (ModeURL over TCP)
	testImageEnv = "TWICE_TEST_DOCKER_IMAGE"    // a local PostgreSQL image (ModeDocker)
	helperEnv    = "TWICE_PGSERVER_TEST_HELPER" // runs the helper tests in a child process
)

func startLocalT(t *testing.T) *Server {
	t.Helper()
	srv, err := Start(context.Background(), Config{Mode: ModeLocal})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	return srv
}

// exercise proves the server takes what the harness does: create a
// database, connect to it with pgx and database/sql, drop it.
func exercise(t *testing.T, srv *Server) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, srv.ConnString(""))
	require.NoError(t, err)
	defer admin.Close(ctx)
	name := fmt.Sprintf("twice_pgserver_test_%d", time.Now().UnixNano())
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	defer admin.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)")

	conn, err := pgx.Connect(ctx, srv.ConnString(name))
	require.NoError(t, err)
	var got string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_database()").Scan(&got))
	conn.Close(ctx)
	assert.Equal(t, name, got)

	db, err := sql.Open("pgx", srv.ConnString(name))
	require.NoError(t, err)
	defer db.Close()
	got = ""
	require.NoError(t, db.QueryRowContext(ctx, "SELECT current_database()").Scan(&got))
	assert.Equal(t, name, got)
	assert.Greater(t, srv.Version(), 100000)
}

func TestLocal(t *testing.T) {
	srv := startLocalT(t)
	assert.Equal(t, ModeLocal, srv.Mode())
	exercise(t, srv)

	dir, pid := srv.local.runDir, srv.local.ref.PID
	require.NoError(t, srv.Close())
	assert.NoDirExists(t, dir)
	assert.False(t, srv.local.ref.Alive(), "postgres (pid %d) still runs after Close", pid)
	require.NoError(t, srv.Close(), "a second Close")
}

func TestLocalManyConnections(t *testing.T) {
	srv := startLocalT(t)
	ctx := context.Background()
	var conns []*pgx.Conn
	defer func() {
		for _, c := range conns {
			c.Close(ctx)
		}
	}()
	for i := 0; i < 200; i++ {
		c, err := pgx.Connect(ctx, srv.ConnString("postgres"))
		require.NoError(t, err, "connection %d", i+1)
		conns = append(conns, c)
	}
}

func TestURL(t *testing.T) {
	// The URL mode against a server this package started: a unix socket in
	// keyword/value form. TWICE_TEST_DATABASE_URL adds a TCP server in URL form.
	local := startLocalT(t)
	urls := map[string]string{"local unix socket": local.ConnString("postgres")}
	if u := os.Getenv(testURLEnv); u != "" {
		urls["TWICE_TEST_DATABASE_URL"] = u
	} else {
		t.Logf("%s unset: the URL mode is tested on a local server's unix socket only", testURLEnv)
	}
	for name, u := range urls {
		t.Run(name, func(t *testing.T) {
			srv, err := Start(context.Background(), Config{Mode: ModeURL, URL: u})
			require.NoError(t, err)
			assert.Equal(t, ModeURL, srv.Mode())
			exercise(t, srv)
			require.NoError(t, srv.Close())
		})
	}
}

func TestURLUserMayNotCreateDatabase(t *testing.T) {
	local := startLocalT(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, local.ConnString(""))
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, "CREATE ROLE twice_nocreate LOGIN NOCREATEDB")
	require.NoError(t, err)

	kv, err := parseKeywordValue(local.ConnString(""))
	require.NoError(t, err)
	kv["user"] = "twice_nocreate"
	_, err = Start(ctx, Config{URL: formatKeywordValue(kv)})
	require.Error(t, err)
	assert.Contains(t, blame.Message(err), `[twice] config: TWICE_DATABASE_URL: user "twice_nocreate"`)
	assert.Contains(t, err.Error(), "may not CREATE DATABASE")
	assert.Contains(t, err.Error(), `ALTER ROLE "twice_nocreate" CREATEDB`)
}

func TestURLUnreachable(t *testing.T) {
	tests := []struct {
		name, url, want string
	}{
		{"refused port", "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable", "127.0.0.1:1"},
		{"no socket", "host=/nonexistent/twice port=5432 user=postgres dbname=postgres", "unix socket /nonexistent/twice/.s.PGSQL.5432"},
		{"no such role", "", "role"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := tt.url
			if u == "" {
				kv, err := parseKeywordValue(startLocalT(t).ConnString(""))
				require.NoError(t, err)
				kv["user"] = "twice_no_such_role"
				u = formatKeywordValue(kv)
			}
			_, err := Start(context.Background(), Config{URL: u})
			require.Error(t, err)
			assert.Contains(t, blame.Message(err), "[twice] config: TWICE_DATABASE_URL: cannot use PostgreSQL at ")
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"bad mode", Config{Mode: "postgres"}, `[twice] config: TWICE_POSTGRES="postgres" is not a way to get PostgreSQL: use url, local or docker`},
		{"url mode without url", Config{Mode: ModeURL}, "[twice] config: TWICE_POSTGRES=url but TWICE_DATABASE_URL is empty"},
		{"unparsable url", Config{URL: "postgres://a b@/"}, "[twice] config: TWICE_DATABASE_URL is not a PostgreSQL connection string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Start(context.Background(), tt.cfg)
			require.Error(t, err)
			assert.Contains(t, blame.Message(err), tt.want)
		})
	}
}

// TestNoWayAvailable runs Start in a child with no URL, no binaries and no
// Docker engine (a fresh process: testcontainers-go caches the engine it
// found).
func TestNoWayAvailable(t *testing.T) {
	// testcontainers-go falls back to /var/run/docker.sock whatever
	// DOCKER_HOST says: hide the socket in a private mount namespace.
	unshare, err := exec.LookPath("unshare")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and unshare(1) to hide the Docker socket from a child")
	}
	// The child has no PATH, so no go to build the Docker helper with.
	helper, err := dockerHelper(context.Background())
	require.NoError(t, err)
	for _, mode := range []string{"", ModeLocal, ModeDocker} {
		t.Run("mode="+mode, func(t *testing.T) {
			cmd := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c",
				`for s in /var/run/docker.sock /run/docker.sock; do [ -e "$s" ] && mount --bind /dev/null "$s"; done; exec "$@"`,
				"sh", os.Args[0], "-test.run=^TestHelperNoWay$", "-test.v")
			cmd.Env = append(os.Environ(), helperEnv+"=1", "TWICE_POSTGRES="+mode, "DOCKER_HOST=", "TWICE_DATABASE_URL=", dockerHelperEnv+"="+helper)
			b, err := cmd.CombinedOutput()
			out := string(b)
			t.Log(out)
			require.NoError(t, err, out)
			switch mode {
			case "":
				assert.Contains(t, out, "[twice] config: no PostgreSQL server: twice needs one of")
				for _, want := range []string{"TWICE_DATABASE_URL=postgres://", "apt-get install postgresql", "Docker engine", "TWICE_POSTGRES_IMAGE", "no initdb and postgres found", "no Docker engine answered"} {
					assert.Contains(t, out, want)
				}
			case ModeLocal:
				assert.Contains(t, out, "[twice] config: TWICE_POSTGRES=local but no initdb and postgres found")
			case ModeDocker:
				assert.Contains(t, out, "[twice] config: TWICE_POSTGRES=docker but no Docker engine answered")
			}
		})
	}
}

func TestHelperNoWay(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("helper for TestNoWayAvailable")
	}
	localSearchDirs = func() []string { return nil }
	t.Setenv("PATH", "")
	_, err := Start(context.Background(), ConfigFromEnv())
	if err == nil {
		t.Fatal("Start found a server")
	}
	fmt.Println("ERROR:", blame.Message(err))
}

// TestLifetime: a test binary that exits, or is killed, leaves no server
// and no directory behind.
func TestLifetime(t *testing.T) {
	for _, end := range []string{"exit", "panic", "sigkill"} {
		t.Run(end, func(t *testing.T) {
			child, pid, dir := startHelperServer(t, end)
			if end == "sigkill" {
				require.NoError(t, child.Process.Signal(syscall.SIGKILL))
			}
			child.Wait()
			eventually(t, func() bool { return !owner.Of(pid).Alive() }, "postgres (pid %d) still runs", pid)
			eventually(t, func() bool { _, err := os.Stat(dir); return os.IsNotExist(err) }, "%s still exists", dir)
		})
	}
}

// TestLifetimeDocker: a killed test binary leaves no container; one whose
// watchdog was killed too is removed by the next run.
func TestLifetimeDocker(t *testing.T) {
	image := os.Getenv(testImageEnv)
	if image == "" {
		t.Skipf("%s unset: no Docker mode tests", testImageEnv)
	}
	cli, err := testcontainers.NewDockerClientWithOpts(context.Background())
	require.NoError(t, err)
	defer cli.Close()
	exists := func(id string) bool {
		list, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("id", id)})
		require.NoError(t, err)
		return len(list.Items) > 0
	}
	for _, killWatchdog := range []bool{false, true} {
		t.Run(fmt.Sprintf("watchdog killed=%v", killWatchdog), func(t *testing.T) {
			child, id := startHelperContainer(t, image)
			require.True(t, exists(id))
			if killWatchdog {
				require.NoError(t, syscall.Kill(watchdogOf(t, child), syscall.SIGKILL))
			}
			require.NoError(t, child.Process.Signal(syscall.SIGKILL))
			child.Wait()
			if killWatchdog {
				require.True(t, exists(id), "nothing should have removed the container yet")
				helper, err := dockerHelper(context.Background())
				require.NoError(t, err)
				require.NoError(t, sweepContainers(context.Background(), helper))
			}
			eventually(t, func() bool { return !exists(id) }, "container %s still exists", shortID(id))
		})
	}
}

func startHelperContainer(t *testing.T, image string) (*exec.Cmd, string) {
	t.Helper()
	return startHelper(t, "TestHelperContainer", "TWICE_POSTGRES=docker", "TWICE_POSTGRES_IMAGE="+image)
}

func TestHelperContainer(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("helper for TestLifetimeDocker")
	}
	srv, err := Shared(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("READY %s\n", srv.container)
	time.Sleep(time.Hour)
}

// startHelperServer starts a child that starts a local server and then
// ends as `end` says ("sigkill": waits to be killed).
func startHelperServer(t *testing.T, end string) (*exec.Cmd, int, string) {
	t.Helper()
	cmd, ready := startHelper(t, "TestHelperLocalServer", helperEnv+"="+end, "TWICE_POSTGRES=local")
	var pid, wdPid int
	var dir string
	_, err := fmt.Sscanf(ready, "%d %d %s", &pid, &wdPid, &dir)
	require.NoError(t, err, ready)
	return cmd, pid, dir
}

// startHelper runs one helper test of this binary in a child until it
// prints "READY <what>", and returns the child and what.
func startHelper(t *testing.T, test string, env ...string) (*exec.Cmd, string) {
	t.Helper()
	return startHelperStdin(t, test, nil, env...)
}

// startHelperStdin is startHelper with the child's stdin, so a child can
// wait for the parent's word (EOF) before it goes on.
func startHelperStdin(t *testing.T, test string, stdin *os.File, env ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v")
	cmd.Env = append(append(os.Environ(), helperEnv+"=1"), env...)
	cmd.Stdin = stdin
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if ready, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
			go func() { // keep the pipe drained
				for sc.Scan() {
				}
			}()
			return cmd, ready
		}
	}
	_ = cmd.Wait()
	t.Fatalf("helper %s ended before it was ready:\n%s", test, stderr.String())
	return nil, ""
}

func TestHelperLocalServer(t *testing.T) {
	end := os.Getenv(helperEnv)
	if end == "" {
		t.Skip("helper for TestLifetime")
	}
	srv, err := Shared(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("READY %d %d %s\n", srv.local.ref.PID, srv.local.wd.cmd.Process.Pid, srv.local.runDir)
	switch end {
	case "panic":
		panic("helper panics with the server running")
	case "sigkill":
		time.Sleep(time.Hour)
	}
}

// TestLeftoversRemoved: when the test binary and its watchdog are both
// killed, the next run stops the server and removes the directory; a live
// owner's cluster is left alone.
func TestLeftoversRemoved(t *testing.T) {
	live := startLocalT(t)

	child, pid, dir := startHelperServer(t, "sigkill")
	wd := watchdogOf(t, child)
	require.NoError(t, syscall.Kill(wd, syscall.SIGKILL))
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	child.Wait()
	require.True(t, owner.Of(pid).Alive(), "postgres should outlive its killed owner and watchdog")

	sweepRunDirs(filepath.Dir(dir))
	eventually(t, func() bool { return !owner.Of(pid).Alive() }, "leftover postgres (pid %d) still runs", pid)
	assert.NoDirExists(t, dir)

	assert.DirExists(t, live.local.runDir, "a live owner's cluster was removed")
	assert.True(t, live.local.ref.Alive(), "a live owner's postgres was stopped")
	exercise(t, live)
}

// watchdogOf finds the watchdog the helper started (a child of it).
func watchdogOf(t *testing.T, helper *exec.Cmd) int {
	t.Helper()
	var wd int
	eventually(t, func() bool {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			var pid int
			if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
				continue
			}
			env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if strings.Contains(string(env), watchdogEnv+"=1") && strings.Contains(string(stat), fmt.Sprintf(") S %d ", helper.Process.Pid)) {
				wd = pid
				return true
			}
		}
		return false
	}, "no watchdog under pid %d", helper.Process.Pid)
	return wd
}

func eventually(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // generous: a bound, not a timing assertion
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf(format, args...)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDocker(t *testing.T) {
	image := os.Getenv(testImageEnv)
	if image == "" {
		t.Skipf("%s unset: set it to a PostgreSQL image on this machine (CI: twice-postgres:ci from .ci/build-pg-image.sh) to test the Docker mode", testImageEnv)
	}
	srv, err := Start(context.Background(), Config{Mode: ModeDocker, Image: image})
	require.NoError(t, err)
	defer srv.Close()
	assert.Equal(t, ModeDocker, srv.Mode())
	exercise(t, srv)

	id := srv.container
	require.NoError(t, srv.Close())
	cli, err := testcontainers.NewDockerClientWithOpts(context.Background())
	require.NoError(t, err)
	defer cli.Close()
	list, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("id", id)})
	require.NoError(t, err)
	assert.Empty(t, list.Items, "container %s still exists after Close", shortID(id))
}

func TestDockerMissingImage(t *testing.T) {
	if os.Getenv(testImageEnv) == "" {
		t.Skipf("%s unset: no Docker mode tests", testImageEnv)
	}
	_, err := Start(context.Background(), Config{Mode: ModeDocker, Image: "twice-no-such-image:never"})
	require.Error(t, err)
	assert.Contains(t, blame.Message(err), "[twice] internal: Docker image twice-no-such-image:never is not on this machine and pulling it failed")
}

func TestConnString(t *testing.T) {
	tests := []struct {
		name, base, want string
	}{
		{"url", "postgres://u:p%40ss@db.example:5433/postgres?sslmode=require&application_name=x", "postgres://u:p%40ss@db.example:5433/twice_1?application_name=x&sslmode=require"},
		{"postgresql url without path", "postgresql://u@h", "postgresql://u@h/twice_1"},
		{"url with dbname parameter", "postgres://u@h/postgres?dbname=other", "postgres://u@h/twice_1?dbname=twice_1"},
		{"url with unix socket host", "postgres:///postgres?host=%2Ftmp%2Fsock&user=u", "postgres:///twice_1?host=%2Ftmp%2Fsock&user=u"},
		{"keyword value", "host=/tmp/a\\ b port=5432 user=postgres dbname=postgres", "dbname='twice_1' host='/tmp/a b' port='5432' user='postgres'"},
		{"keyword value quoted", "host='/tmp/x y' password='a\\'b c' user=u", "dbname='twice_1' host='/tmp/x y' password='a\\'b c' user='u'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &Server{base: tt.base}
			got := srv.ConnString("twice_1")
			if tt.want != "" {
				gu, _ := url.Parse(got)
				wu, _ := url.Parse(tt.want)
				if gu != nil && wu != nil && gu.Scheme != "" {
					assert.Equal(t, wu.Query(), gu.Query())
					gu.RawQuery, wu.RawQuery = "", ""
					assert.Equal(t, wu.String(), gu.String())
				} else {
					assert.Equal(t, tt.want, got)
				}
			}
			want, err := pgx.ParseConfig(tt.base)
			if err != nil {
				// Only our own forms must parse; libpq's '' inside quotes is not pgx's.
				return
			}
			cfg, err := pgx.ParseConfig(got)
			require.NoError(t, err, got)
			assert.Equal(t, "twice_1", cfg.Database)
			assert.Equal(t, want.Host, cfg.Host)
			assert.Equal(t, want.Port, cfg.Port)
			assert.Equal(t, want.User, cfg.User)
			assert.Equal(t, want.Password, cfg.Password)
			assert.Equal(t, want.RuntimeParams, cfg.RuntimeParams)
			assert.Equal(t, srv.base, srv.ConnString(""), "empty database means the maintenance database")
		})
	}
}

func TestWithoutPassword(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"url", "postgres://u:s3cret@db.example:5433/twice_1?sslmode=require", "postgres://u@db.example:5433/twice_1?sslmode=require"},
		{"url escaped", "postgresql://u:p%40s3cret@h/x", "postgresql://u@h/x"},
		{"url password parameter", "postgres://u@h/x?password=s3cret&sslmode=disable", "postgres://u@h/x?sslmode=disable"},
		{"url unix socket", "postgres://u:s3cret@/x?host=%2Ftmp", "postgres://u@/x?host=%2Ftmp"},
		{"url no password", "postgres://u@h/x", "postgres://u@h/x"},
		{"keyword value", "host=h user=u password=s3cret dbname=x", "dbname='x' host='h' user='u'"},
		{"keyword value quoted", `host=h password='it\'s s3cret' dbname=x`, "dbname='x' host='h'"},
		{"keyword value no password", "host=h dbname=x", "host=h dbname=x"},
		{"unparseable", "postgres://u:s3cret@h:port/x", "(a connection string that does not parse)"},
		{"unterminated", "password='s3cret", "(a connection string that does not parse)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := WithoutPassword(tt.in)
			assert.Equal(t, tt.want, got)
			assert.NotContains(t, got, "s3cret")
		})
	}
}

// TestDockerHelperBuildFails: a module that cannot build the Docker
// helper gets go's own message, the command that failed, and the way
// around it; a named helper that does not exist is a config error.
func TestDockerHelperBuildFails(t *testing.T) {
	t.Run("module without twice", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/notwice\n\ngo 1.22\n"), 0o600))
		t.Chdir(dir)
		keepGoCache(t)
		t.Setenv("XDG_CACHE_HOME", t.TempDir())
		t.Setenv("GOPROXY", "off")
		t.Setenv("GOWORK", "off")
		t.Setenv(dockerHelperEnv, "")
		_, err := dockerHelper(context.Background())
		require.Error(t, err)
		t.Log(err)
		for _, want := range []string{"[twice] config: TWICE_POSTGRES=docker needs its helper, and `cd " + dir + " && go build", dockerHelperPkg, "set TWICE_PGDOCKER"} {
			assert.Contains(t, blame.Message(err), want)
		}
	})
	t.Run("TWICE_PGDOCKER names nothing", func(t *testing.T) {
		t.Setenv(dockerHelperEnv, "/nonexistent/twice-pgdocker")
		_, err := dockerHelper(context.Background())
		require.Error(t, err)
		assert.Contains(t, blame.Message(err), "[twice] config: TWICE_PGDOCKER=/nonexistent/twice-pgdocker: ")
	})
}

// TestDockerHelperTidyModule: a module that requires twice but, tidy, has
// no go.sum lines for testcontainers-go (only the helper imports it) still
// gets the helper, and its go.mod and go.sum are left as they were.
func TestDockerHelperTidyModule(t *testing.T) {
	if testing.Short() {
		t.Skip("links the Docker helper: seconds")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	dir := t.TempDir()
	gomod := "module example.com/usestwice\n\ngo 1.26.0\n\nrequire github.com/runtwice/twice v0.0.0\n\nreplace github.com/runtwice/twice => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), nil, 0o600))
	t.Chdir(dir)
	keepGoCache(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	// The module cache must hold what the root module's own go.mod needs
	// (in the repository's go.work, other modules raise some versions, so
	// a fresh machine's cache may lack the root's own): download it first,
	// then build with no proxy, so that the helper's build can only use it.
	dl := exec.Command("go", "mod", "download")
	dl.Dir = root
	dl.Env = append(os.Environ(), "GOWORK=off")
	if out, err := dl.CombinedOutput(); err != nil {
		t.Fatalf("go mod download in %s (GOWORK=off): %v\n%s", root, err, out)
	}
	t.Setenv("GOPROXY", "off")
	t.Setenv("GOSUMDB", "off")
	t.Setenv("GOWORK", "off")
	t.Setenv(dockerHelperEnv, "")
	helper, err := dockerHelper(context.Background())
	require.NoError(t, err)
	out, err := exec.Command(helper).CombinedOutput()
	require.Error(t, err, "the helper without a command exits 2")
	assert.Contains(t, string(out), "usage: twice-pgdocker serve")
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	assert.Equal(t, gomod, string(b))
	b, err = os.ReadFile(filepath.Join(dir, "go.sum"))
	require.NoError(t, err)
	assert.Empty(t, b)
}

// keepGoCache pins go's build cache where it is, so a test that moves the
// user cache directory (where the helper goes) does not build cold.
func keepGoCache(t *testing.T) {
	t.Helper()
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	require.NoError(t, err)
	t.Setenv("GOCACHE", strings.TrimSpace(string(out)))
}
