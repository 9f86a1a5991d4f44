package harness_test

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/pgserver"
	"github.com/runtwice/twice/internal/record"
)

const keptEvidenceEnv = "TWICE_HARNESS_TEST_KEPT_EVIDENCE"

// failEvidence runs the helper, whose check fails, in a child process
// with env, and returns the failed scenario of the record it wrote. The
// child has exited when it returns: whatever died with it is gone.
func failEvidence(t *testing.T, env ...string) result.Scenario {
	t.Helper()
	sc, _ := failEvidenceIn(t, nil, env...)
	return sc
}

// failEvidenceIn is failEvidence with the child started through wrap (a
// command that ends by running its arguments, or nil), and also returns
// what the child printed.
func failEvidenceIn(t *testing.T, wrap []string, env ...string) (result.Scenario, string) {
	t.Helper()
	dir := t.TempDir()
	argv := append(append([]string{}, wrap...), os.Args[0], "-test.run=^TestHelperKeptEvidence$", "-test.v")
	cmd := osexec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), append(env, keptEvidenceEnv+"=1", record.DirEnv+"="+dir)...)
	out, err := cmd.CombinedOutput()
	t.Logf("helper output:\n%s", out)
	require.Error(t, err, "the helper's check must fail")
	recs, err := record.Read(dir)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.NotNil(t, recs[0].Result)
	for _, sc := range recs[0].Result.Scenarios {
		if sc.Database != "" {
			return sc, string(out)
		}
	}
	t.Fatalf("no scenario names a kept database: %+v", recs[0].Result.Scenarios)
	return result.Scenario{}, ""
}

// logRows reads the log table of database on srv.
func logRows(t *testing.T, srv *pgserver.Server, database string) []string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), srv.ConnString(database))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	rows, err := conn.Query(t.Context(), `SELECT attempt || ':' || what FROM log ORDER BY 1`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return got
}

func privateServer(t *testing.T) *pgserver.Server {
	t.Helper()
	if os.Getenv("TWICE_POSTGRES") != "" && os.Getenv("TWICE_POSTGRES") != pgserver.ModeLocal {
		t.Skip("needs local server binaries for a private server")
	}
	srv, err := pgserver.Start(t.Context(), pgserver.Config{Mode: pgserver.ModeLocal})
	if err != nil {
		t.Skipf("no private local server: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// TestKeptEvidenceURL: on a server that outlives the test, the record of a
// failed check names the kept database by the name it has after the
// test: it exists and holds the scenario's rows.
func TestKeptEvidenceURL(t *testing.T) {
	srv := privateServer(t)
	sc := failEvidence(t, "TWICE_POSTGRES=url", "TWICE_DATABASE_URL="+srv.ConnString(""))
	cfg, err := pgx.ParseConfig(sc.Database)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(cfg.Database, "twice_kept_"), "the record names %s", cfg.Database)
	assert.Empty(t, sc.Dump, "a server that outlives the test needs no dump")
	assert.Equal(t, []string{"1:ran", "2:ran"}, logRows(t, srv, cfg.Database))
}

// TestKeptEvidenceLocal: on a local cluster, which stops with the test
// binary, the kept database is dumped to a file that restores into a
// fresh database with the scenario's rows after the test has exited.
func TestKeptEvidenceLocal(t *testing.T) {
	srv := privateServer(t)
	sc := failEvidence(t, "TWICE_POSTGRES=local")
	require.NotEmpty(t, sc.Dump, "no dump of the kept database")
	t.Cleanup(func() { _ = os.Remove(sc.Dump) })
	psql := filepath.Join(filepath.Dir(pgDumpOf(t)), "psql")
	conn, err := pgx.Connect(t.Context(), srv.ConnString(""))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(t.Context(), `CREATE DATABASE restored`)
	require.NoError(t, err)
	out, err := osexec.Command(psql, "-q", "-v", "ON_ERROR_STOP=1", "-d", srv.ConnString("restored"), "-f", sc.Dump).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, []string{"1:ran", "2:ran"}, logRows(t, srv, "restored"))
}

// TestKeptEvidenceDocker: in a container, which is removed with the test
// binary, the kept database is dumped by the container's own pg_dump, and
// the restore command the log prints works, as printed, after the test has
// exited and its container is gone.
//
// The host's pg_dump would refuse a server newer than itself. No image of
// a newer server can be built offline (CI's image is the host's
// PostgreSQL 15), so the child runs with the host's PostgreSQL
// installation hidden and a pg_dump on PATH that fails as an older one
// would, and must not need either.
func TestKeptEvidenceDocker(t *testing.T) {
	image := os.Getenv("TWICE_TEST_DOCKER_IMAGE")
	if image == "" {
		t.Skip("TWICE_TEST_DOCKER_IMAGE unset: no Docker mode tests")
	}
	wrap, env, fakeRan := hideHostPgDump(t)
	sc, out := failEvidenceIn(t, wrap, append(env, "TWICE_POSTGRES=docker", "TWICE_POSTGRES_IMAGE="+image)...)
	require.NotEmpty(t, sc.Dump, "no dump of the kept database")
	t.Cleanup(func() { _ = os.Remove(sc.Dump) })
	assert.Empty(t, sc.DumpError)
	assert.NoFileExists(t, fakeRan, "the dump ran a pg_dump on the host")
	_, restore, ok := strings.Cut(out, "restore it with ")
	require.True(t, ok, "the log prints no restore command")
	restore, _, _ = strings.Cut(restore, "\n")
	require.Contains(t, restore, sc.Dump)

	srv := restoreServer(t, image)
	cfg, err := pgx.ParseConfig(srv.ConnString(""))
	require.NoError(t, err)
	cmd := osexec.Command("sh", "-c", restore)
	cmd.Env = append(os.Environ(),
		"PATH="+filepath.Dir(pgDumpOf(t))+string(os.PathListSeparator)+os.Getenv("PATH"),
		"PGHOST="+cfg.Host, fmt.Sprintf("PGPORT=%d", cfg.Port), "PGUSER="+cfg.User, "PGPASSWORD="+cfg.Password)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s\n%s", restore, b)
	name := strings.TrimSuffix(filepath.Base(sc.Dump), ".sql")
	assert.Equal(t, []string{"1:ran", "2:ran"}, logRows(t, srv, name))
}

// hideHostPgDump returns a wrapper that runs a command in a private mount
// namespace where every pg_dump of the host's PostgreSQL installations is
// /dev/null, and an environment whose first pg_dump on PATH fails like one
// older than the server and leaves the file fakeRan. The server binaries
// stay. Without root and unshare(1) it skips t.
func hideHostPgDump(t *testing.T) (wrap, env []string, fakeRan string) {
	t.Helper()
	unshare, err := osexec.LookPath("unshare")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and unshare(1) to hide the host's pg_dump from a child")
	}
	dir := t.TempDir()
	fakeRan = filepath.Join(dir, "ran")
	fake := "#!/bin/sh\necho ran > '" + fakeRan + "'\necho 'pg_dump: error: aborting because of server version mismatch' >&2\nexit 1\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pg_dump"), []byte(fake), 0o755))
	script := `for f in /usr/lib/postgresql/*/bin/pg_dump /usr/bin/pg_dump; do if [ -e "$f" ]; then mount --bind /dev/null "$f" || exit 1; fi; done; exec "$@"`
	wrap = []string{unshare, "--mount", "--propagation", "private", "sh", "-c", script, "sh"}
	return wrap, []string{"PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH")}, fakeRan
}

// TestKeptEvidenceDumpFails: when the kept database of a server that
// stops with the test binary cannot be dumped (here the local cluster's
// pg_dump is hidden and the one on PATH fails), the log and the record say
// that it is lost and why, and name no dump file.
func TestKeptEvidenceDumpFails(t *testing.T) {
	privateServer(t) // the same gate as the local mode's tests
	wrap, env, fakeRan := hideHostPgDump(t)
	sc, out := failEvidenceIn(t, wrap, append(env, "TWICE_POSTGRES=local")...)
	assert.FileExists(t, fakeRan, "the failing pg_dump did not run")
	assert.Empty(t, sc.Dump)
	require.NotNil(t, sc.DumpError)
	assert.Contains(t, sc.DumpError.Message, "dumping database twice_kept_")
	assert.Contains(t, sc.DumpError.Message, "/pg_dump failed: exit status 1\npg_dump: error: aborting because of server version mismatch")
	// The log carries the error as the dump gave it, not trimmed.
	assert.Contains(t, out, "while the test binary runs; it could not be dumped, so it is lost when the test binary exits (its server stops with it): "+strings.SplitN(sc.DumpError.Message, "\n", 2)[0])
	assert.NotContains(t, out, "restore it with")
}

// restoreServer is a server to restore a dump into, other than the one
// that made it: a private local cluster, else a container of image.
func restoreServer(t *testing.T, image string) *pgserver.Server {
	t.Helper()
	srv, err := pgserver.Start(t.Context(), pgserver.Config{Mode: pgserver.ModeLocal})
	if err != nil {
		srv, err = pgserver.Start(t.Context(), pgserver.Config{Mode: pgserver.ModeDocker, Image: image})
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// pgDumpOf finds the pg_dump the harness uses, to run the psql next to it.
func pgDumpOf(t *testing.T) string {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/psql")
	slices.Sort(dirs)
	if len(dirs) > 0 {
		return filepath.Join(filepath.Dir(dirs[len(dirs)-1]), "pg_dump")
	}
	p, err := osexec.LookPath("psql")
	if err != nil {
		t.Skip("no psql to restore with")
	}
	return filepath.Join(filepath.Dir(p), "pg_dump")
}

func TestHelperKeptEvidence(t *testing.T) {
	if os.Getenv(keptEvidenceEnv) == "" {
		t.Skip("helper for the TestKeptEvidence tests")
	}
	s, err := faults.Parse("j1a1w1 > j1a2w2")
	require.NoError(t, err)
	setup := []harness.Setup{harness.SQL(stepsSchema)}
	big := os.Getenv(keptBigEnv) != ""
	if big {
		setup = append(setup, harness.SQL(bigFixture))
	}
	harness.Check(t, harness.Job{Name: "twice-logger", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if big {
			if _, err := d.DB.Exec(ctx, `UPDATE fixture SET pad = 'seen' WHERE id = 1`); err != nil {
				return err
			}
		}
		_, err := d.DB.Exec(ctx, `INSERT INTO log VALUES ($1, 'ran')`, d.Attempt)
		return err
	}}, harness.Config{
		Setup:  setup,
		Faults: []faults.Fault{faults.Replay(s)},
	})
}

const keptBigEnv = "TWICE_HARNESS_TEST_KEPT_BIG"

// bigFixture is a keyed table of about 2 MB: big enough to be reset and
// read through the write history, and dumped without its rows.
const bigFixture = `CREATE TABLE fixture (id int PRIMARY KEY, pad text NOT NULL);
INSERT INTO fixture SELECT i, repeat('x', 200) FROM generate_series(1, 8000) i;`

// TestKeptEvidenceLocalBigTable: the dump of a kept database leaves out
// the rows of a big table, which are the fixture's but for those the
// scenario wrote; its write history, dumped, holds those.
func TestKeptEvidenceLocalBigTable(t *testing.T) {
	srv := privateServer(t)
	sc, out := failEvidenceIn(t, nil, "TWICE_POSTGRES=local", keptBigEnv+"=1")
	require.NotEmpty(t, sc.Dump, "no dump of the kept database")
	t.Cleanup(func() { _ = os.Remove(sc.Dump) })
	assert.Contains(t, out, `(without the rows of public.fixture, the fixture's: the rows the scenario wrote are in twice.history)`)
	psql := filepath.Join(filepath.Dir(pgDumpOf(t)), "psql")
	conn, err := pgx.Connect(t.Context(), srv.ConnString(""))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(t.Context(), `CREATE DATABASE restored_big`)
	require.NoError(t, err)
	restore, err := osexec.Command(psql, "-q", "-v", "ON_ERROR_STOP=1", "-d", srv.ConnString("restored_big"), "-f", sc.Dump).CombinedOutput()
	require.NoError(t, err, "%s", restore)
	assert.Equal(t, []string{"1:ran", "2:ran"}, logRows(t, srv, "restored_big"))
	restored, err := pgx.Connect(t.Context(), srv.ConnString("restored_big"))
	require.NoError(t, err)
	defer restored.Close(context.Background())
	var rows, written int
	require.NoError(t, restored.QueryRow(t.Context(), `SELECT count(*) FROM fixture`).Scan(&rows))
	require.NoError(t, restored.QueryRow(t.Context(),
		`SELECT count(*) FROM twice.history WHERE new->>'pad' = 'seen'`).Scan(&written)) // rel is the kept database's OID
	assert.Zero(t, rows, "the dump holds the big table's rows")
	assert.Equal(t, 2, written, "the dumped history holds both deliveries' writes of the big table")
}
