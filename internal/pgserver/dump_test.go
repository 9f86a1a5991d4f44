package pgserver

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/pgserver/dockerproto"
)

const dumpFixture = `CREATE TABLE widgets (id int PRIMARY KEY, name text NOT NULL);
INSERT INTO widgets VALUES (1, 'sprocket'), (2, 'gear');`

// createDumpFixture makes database name on srv with dumpFixture in it.
func createDumpFixture(t *testing.T, srv *Server, name string) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, srv.ConnString(""))
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, srv.ConnString(name))
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, dumpFixture)
	require.NoError(t, err)
}

// widgets reads the fixture's rows back from database on srv.
func widgets(t *testing.T, srv *Server, database string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srv.ConnString(database))
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT id || ':' || name FROM widgets ORDER BY id`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return got
}

// hideHostPgDump makes the host's pg_dump unreachable for the rest of t:
// neither findBinaries nor PATH finds a server installation, and the only
// pg_dump on PATH fails as an older pg_dump facing a newer server does,
// and leaves a file behind that says it ran.
func hideHostPgDump(t *testing.T) (ran string) {
	t.Helper()
	dir := t.TempDir()
	ran = filepath.Join(dir, "ran")
	script := "#!/bin/sh\necho ran > '" + ran + "'\necho 'pg_dump: error: aborting because of server version mismatch' >&2\nexit 1\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pg_dump"), []byte(script), 0o755))
	saved := localSearchDirs
	localSearchDirs = func() []string { return []string{dir} }
	t.Cleanup(func() { localSearchDirs = saved })
	t.Setenv("PATH", dir)
	_, err := findBinaries()
	require.Error(t, err, "server binaries still found")
	return ran
}

// TestDumpDocker: a kept database in a container is dumped by the
// container's own pg_dump, not the host's (which is hidden, and fails like
// an older pg_dump would), its header names the server's version as
// pg_dump's, and it restores after the container is gone.
//
// No image with a server newer than the host's pg_dump can be built
// offline (the CI image is the host's PostgreSQL 15), so the mismatch
// itself is not reproduced: hiding the host's pg_dump shows that it is
// never needed.
func TestDumpDocker(t *testing.T) {
	if os.Getenv(testImageEnv) == "" {
		t.Skipf("%s unset: no Docker mode tests", testImageEnv)
	}
	file := filepath.Join(t.TempDir(), "kept.sql")
	t.Run("host pg_dump hidden", func(t *testing.T) {
		srv := startDockerServer(t)
		defer srv.Close()
		createDumpFixture(t, srv, "twice_kept_0a1b2c3d_1")
		serverVersion := showServerVersion(t, srv)
		ran := hideHostPgDump(t)

		require.NoError(t, srv.Dump(context.Background(), "twice_kept_0a1b2c3d_1", file))
		assert.NoFileExists(t, ran, "the host's pg_dump ran")
		assert.NoFileExists(t, file+".part")
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		dump := string(b)
		for _, want := range []string{"-- PostgreSQL database dump", "-- Dumped by pg_dump version ", "CREATE TABLE public.widgets", "1\tsprocket", "-- PostgreSQL database dump complete"} {
			assert.Contains(t, dump, want)
		}
		assert.NotContains(t, dump, "OWNER TO", "dumped with owners")
		// The server's own pg_dump: its version is the server's.
		assert.Contains(t, dump, "\n-- Dumped from database version "+serverVersion+"\n")
		assert.Contains(t, dump, "\n-- Dumped by pg_dump version "+serverVersion+"\n")
		require.NoError(t, srv.Close())
	})
	if t.Failed() {
		return
	}

	// The container is gone; the dump restores into another server.
	local, err := Start(context.Background(), Config{Mode: ModeLocal})
	if err != nil {
		t.Skipf("no local server to restore into: %v", err)
	}
	t.Cleanup(func() { local.Close() })
	bins, err := findBinaries()
	require.NoError(t, err)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, local.ConnString(""))
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, "CREATE DATABASE restored")
	require.NoError(t, err)
	out, err := exec.Command(filepath.Join(bins.dir, "psql"), "-q", "-v", "ON_ERROR_STOP=1", "-d", local.ConnString("restored"), "-f", file).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, []string{"1:sprocket", "2:gear"}, widgets(t, local, "restored"))
}

// showServerVersion is the server's version as pg_dump writes it in a
// dump's header.
func showServerVersion(t *testing.T, srv *Server) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srv.ConnString(""))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var v string
	require.NoError(t, conn.QueryRow(ctx, "SHOW server_version").Scan(&v))
	return v
}

// renamedExecer runs another command than asked for, in a real container.
type renamedExecer struct {
	execer
	name string
}

func (r renamedExecer) execToFile(ctx context.Context, cmd, env []string, path string) (dockerproto.Response, error) {
	return r.execer.execToFile(ctx, append([]string{r.name}, cmd[1:]...), env, path)
}

// TestDumpFails: a dump that fails says which pg_dump failed and what it
// printed, and leaves no file.
func TestDumpFails(t *testing.T) {
	// One container for the cases that need one: each takes seconds.
	var docker *Server
	dockerSrv := func(t *testing.T) *Server {
		if docker == nil {
			docker = startDockerServer(t)
		}
		return docker
	}
	defer func() {
		if docker != nil {
			docker.Close()
		}
	}()
	tests := []struct {
		name   string
		server func(t *testing.T) *Server
		db     string
		want   []string
	}{
		{
			name:   "local: no such database",
			server: startLocalT,
			db:     "twice_kept_0a1b2c3d_9",
			want:   []string{"[twice] dumping database twice_kept_0a1b2c3d_9 with /", "/pg_dump failed: exit status 1", `database "twice_kept_0a1b2c3d_9" does not exist`},
		},
		{
			name:   "docker: no such database",
			server: dockerSrv,
			db:     "twice_kept_0a1b2c3d_9",
			want:   []string{"[twice] dumping database twice_kept_0a1b2c3d_9 with pg_dump inside PostgreSQL container ", "failed with exit code 1:", `database "twice_kept_0a1b2c3d_9" does not exist`},
		},
		{
			name: "docker: image without pg_dump",
			server: func(t *testing.T) *Server {
				srv := dockerSrv(t)
				return &Server{mode: ModeDocker, base: srv.base, container: srv.container, image: srv.image, ctr: renamedExecer{srv.ctr, "twice_no_pg_dump"}}
			},
			db:   "postgres",
			want: []string{"[twice] dumping database postgres with pg_dump inside PostgreSQL container ", `"twice_no_pg_dump": executable file not found`, "the image has no runnable pg_dump on its PATH: set TWICE_POSTGRES_IMAGE"},
		},
		{
			name: "docker: its output is not the engine's stream",
			server: func(t *testing.T) *Server {
				return &Server{mode: ModeDocker, base: "host=h user=postgres password=pw", container: "0123456789abcdef", image: "pg:test", ctr: fakeExecer{resp: dockerproto.Response{ReadError: "Unrecognized input header: 110"}}}
			},
			db:   "postgres",
			want: []string{"[twice] internal: dumping database postgres with pg_dump inside PostgreSQL container 0123456789ab (image pg:test): reading its output: "},
		},
		{
			name: "docker: pg_dump not found (fake engine)",
			server: func(t *testing.T) *Server {
				return &Server{mode: ModeDocker, base: "host=h user=postgres password=pw", container: "0123456789abcdef", image: "pg:test", ctr: fakeExecer{resp: dockerproto.Response{Code: 127, Stderr: "exec: \"pg_dump\": executable file not found in $PATH\n"}}}
			},
			db: "postgres",
			want: []string{
				"[twice] dumping database postgres with pg_dump inside PostgreSQL container 0123456789ab (image pg:test) failed with exit code 127:\nexec: \"pg_dump\": executable file not found in $PATH\nthe image has no runnable pg_dump",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := tt.server(t)
			file := filepath.Join(t.TempDir(), "kept.sql")
			err := srv.Dump(context.Background(), tt.db, file)
			require.Error(t, err)
			t.Log(err)
			for _, want := range tt.want {
				assert.Contains(t, blame.Message(err), want)
			}
			assert.NotContains(t, err.Error(), "s3cret")
			assert.NoFileExists(t, file)
			assert.NoFileExists(t, file+".part")
		})
	}
}

// TestDumpPasswordNotInArgv: the container's pg_dump gets the password
// through its environment, never its command line.
func TestDumpPasswordNotInArgv(t *testing.T) {
	fake := &recordingExecer{}
	srv := &Server{mode: ModeDocker, base: "host=h user=postgres password=s3cret", container: "0123456789abcdef", image: "pg:test", ctr: fake}
	require.NoError(t, srv.Dump(context.Background(), "twice_kept_0a1b2c3d_1", filepath.Join(t.TempDir(), "kept.sql")))
	require.NotEmpty(t, fake.cmd)
	assert.Equal(t, "pg_dump", fake.cmd[0])
	assert.NotContains(t, strings.Join(fake.cmd, " "), "s3cret")
	cfg, err := pgconn.ParseConfig(fake.cmd[len(fake.cmd)-1])
	require.NoError(t, err, "the last argument is the connection string")
	assert.Equal(t, "twice_kept_0a1b2c3d_1", cfg.Database)
	assert.Equal(t, "postgres", cfg.User)
	assert.Contains(t, fake.env, "PGPASSWORD=s3cret")
}

// startDockerServer starts a container from TWICE_TEST_DOCKER_IMAGE, or
// skips t; the caller closes it.
func startDockerServer(t *testing.T) *Server {
	t.Helper()
	image := os.Getenv(testImageEnv)
	if image == "" {
		t.Skipf("%s unset: no Docker mode tests", testImageEnv)
	}
	srv, err := Start(context.Background(), Config{Mode: ModeDocker, Image: image})
	require.NoError(t, err)
	return srv
}

// fakeExecer answers as the Docker helper would.
type fakeExecer struct{ resp dockerproto.Response }

func (f fakeExecer) execToFile(context.Context, []string, []string, string) (dockerproto.Response, error) {
	return f.resp, nil
}

type recordingExecer struct {
	cmd []string
	env []string
}

func (r *recordingExecer) execToFile(_ context.Context, cmd, env []string, path string) (dockerproto.Response, error) {
	r.cmd, r.env = cmd, env
	return dockerproto.Response{}, os.WriteFile(path, []byte("-- PostgreSQL database dump\n"), 0o600)
}
