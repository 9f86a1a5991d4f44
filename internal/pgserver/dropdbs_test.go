package pgserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/internal/blame"
)

func newTestRunID(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// runDatabases names, for run ID id, the databases a run would make (gone
// after the watchdog) and the ones that only look related (kept); comments
// holds the comment each gets, if any.
func runDatabases(id string) (drop, keep []string, comments map[string]string) {
	prefix := "twice_" + id + "_"
	drop = []string{prefix + "t0123456789abcdef", prefix + "d1", prefix + "d2"}
	keep = []string{
		"twice_kept_" + id + "_1", // evidence a failed test kept
		prefix + "D1",             // the prefix, but not a name a run generates
		prefix + "d1_x",
		prefix + strings.Repeat("a", 41),
		"app_" + id,   // a foreign database
		prefix + "d3", // a foreign database named like the run's: no marker
		prefix + "d4", // another run's marker
		prefix + "d5", // someone's own comment
	}
	comments = map[string]string{}
	for _, name := range slices.Concat(drop, keep[:4]) {
		comments[name] = RunMarker(id)
	}
	comments[prefix+"d4"] = RunMarker("0badc0de")
	comments[prefix+"d5"] = "twice run " + id + " (not really)"
	return drop, keep, comments
}

// createDatabases creates names, each with its comment if it has one.
func createDatabases(t *testing.T, admin *pgx.Conn, names []string, comments map[string]string) {
	t.Helper()
	for _, name := range names {
		_, err := admin.Exec(context.Background(), "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
		require.NoError(t, err)
		if c, ok := comments[name]; ok {
			_, err := admin.Exec(context.Background(), "COMMENT ON DATABASE "+pgx.Identifier{name}.Sanitize()+" IS '"+c+"'")
			require.NoError(t, err)
		}
	}
}

func dropDatabasesT(t *testing.T, admin string, names []string) {
	t.Helper()
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), admin)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		for _, name := range names {
			conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		}
	})
}

func existingDatabases(t *testing.T, admin *pgx.Conn, names []string) []string {
	t.Helper()
	rows, err := admin.Query(context.Background(), "SELECT datname FROM pg_database WHERE datname = ANY($1) ORDER BY 1", names)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return got
}

// TestDropOnExit: a test binary in URL mode that registered its run prefix
// leaves none of its run's databases behind once it exits or is killed,
// even one another session is connected to, and touches nothing else: not
// even a database named like its run's that lacks its marker.
func TestDropOnExit(t *testing.T) {
	// A private local server: no other run's cleanup can drop what this
	// test expects the watchdog to drop.
	local := startLocalT(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, local.ConnString(""))
	require.NoError(t, err)
	defer admin.Close(ctx)
	for _, end := range []string{"exit", "sigkill"} {
		t.Run(end, func(t *testing.T) {
			id := newTestRunID(t)
			drop, keep, _ := runDatabases(id)
			dropDatabasesT(t, local.ConnString(""), slices.Concat(drop, keep))
			// The child exits only once its stdin closes: its databases
			// must be seen while it lives, not raced against its exit.
			release, stdin, err := os.Pipe()
			require.NoError(t, err)
			defer release.Close()
			defer stdin.Close()
			child, _ := startHelperStdin(t, "TestHelperDropOnExit", release, helperEnv+"="+end,
				"TWICE_POSTGRES=url", "TWICE_DATABASE_URL="+local.ConnString(""), "TWICE_PGSERVER_TEST_RUN="+id)
			require.ElementsMatch(t, slices.Concat(drop, keep), existingDatabases(t, admin, slices.Concat(drop, keep)))

			// A session the dead run left open must not keep a database alive.
			held, err := pgx.Connect(ctx, local.ConnString(drop[1]))
			require.NoError(t, err)
			defer held.Close(ctx)

			if end == "sigkill" {
				require.NoError(t, child.Process.Signal(syscall.SIGKILL))
			}
			require.NoError(t, stdin.Close())
			_ = child.Wait()
			eventually(t, func() bool { return len(existingDatabases(t, admin, drop)) == 0 },
				"run databases %v still exist after the test binary ended", drop)
			assert.Equal(t, slices.Sorted(slices.Values(keep)), existingDatabases(t, admin, keep), "databases that are not the run's were dropped")
		})
	}
}

func TestHelperDropOnExit(t *testing.T) {
	end := os.Getenv(helperEnv)
	if end == "" {
		t.Skip("helper for TestDropOnExit")
	}
	ctx := context.Background()
	srv, err := Shared(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := os.Getenv("TWICE_PGSERVER_TEST_RUN")
	if err := srv.DropOnExit("twice_" + id + "_"); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, srv.ConnString(""))
	if err != nil {
		t.Fatal(err)
	}
	drop, keep, comments := runDatabases(id)
	createDatabases(t, admin, slices.Concat(drop, keep), comments)
	fmt.Println("READY " + id)
	if end == "sigkill" {
		select {}
	}
	// "exit": end once the parent has seen the databases (stdin closes).
	_, _ = io.Copy(io.Discard, os.Stdin)
}

func TestDropOnExitRefusesBadPrefix(t *testing.T) {
	for _, prefix := range []string{
		"",
		"twice_",
		"twice_%",
		"twice_0a1b2c3d",
		"twice_0a1b2c3d_d1",
		"twice_0A1B2C3D_",
		"twice_0a1b2c3_",
		"twice_0a1b2c3d4_",
		"twice_kept_",
		"twice_kept_0a1b2c3d_",
		"xtwice_0a1b2c3d_",
		"twice_0a1b2c3d_\n",
		"twice_0a1b2c3d_ host=elsewhere",
	} {
		for _, mode := range []string{ModeURL, ModeLocal} {
			t.Run(fmt.Sprintf("%s %q", mode, prefix), func(t *testing.T) {
				srv := &Server{mode: mode, base: "postgres://postgres@127.0.0.1:1/postgres"}
				err := srv.DropOnExit(prefix)
				require.Error(t, err)
				assert.Contains(t, blame.Message(err), fmt.Sprintf("[twice] internal: DropOnExit(%q): not a run prefix", prefix))
				assert.Nil(t, srv.dropWD, "a watchdog was started for a refused prefix")
			})
		}
	}
	t.Run("local server", func(t *testing.T) {
		// Its databases go with it: nothing to start.
		srv := &Server{mode: ModeLocal}
		require.NoError(t, srv.DropOnExit("twice_0a1b2c3d_"))
		assert.Nil(t, srv.dropWD)
	})
}

func TestDBsLine(t *testing.T) {
	for _, cs := range []string{
		"postgres://u:p%40ss@db.example:5433/postgres?sslmode=require",
		"host='/tmp/a b' password='it\\'s a\nsecret' user=u dbname=postgres",
	} {
		kind, rest, _ := strings.Cut(dbsLine("twice_0a1b2c3d_", cs), " ")
		assert.Equal(t, "dbs", kind)
		job, ok := parseDBsLine(rest)
		require.True(t, ok)
		assert.Equal(t, dbsJob{prefix: "twice_0a1b2c3d_", connString: cs}, job)
		assert.NotContains(t, dbsLine("twice_0a1b2c3d_", cs), "\n", "one line per resource")
	}
	for _, rest := range []string{
		`twice_kept_ "host=x"`,
		`twice_0a1b2c3d_ host=x`,
		`twice_0a1b2c3d_`,
		`twice_%_ "host=x"`,
	} {
		_, ok := parseDBsLine(rest)
		assert.False(t, ok, rest)
	}
}

// TestDropRunDatabases drops in process, both ways: WITH (FORCE) and the
// terminate-then-drop path of servers before 13; only the run's marked
// databases go.
func TestDropRunDatabases(t *testing.T) {
	local := startLocalT(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, local.ConnString(""))
	require.NoError(t, err)
	defer admin.Close(ctx)
	for _, version := range []int{0, 120000} {
		t.Run(fmt.Sprintf("version=%d", version), func(t *testing.T) {
			id := newTestRunID(t)
			drop, keep, comments := runDatabases(id)
			other, _, otherComments := runDatabases(newTestRunID(t)) // a live run's
			maps.Copy(comments, otherComments)
			all := slices.Concat(drop, keep, other)
			dropDatabasesT(t, local.ConnString(""), all)
			createDatabases(t, admin, all, comments)
			held, err := pgx.Connect(ctx, local.ConnString(drop[1]))
			require.NoError(t, err)
			defer held.Close(ctx)

			require.NoError(t, dropRunDatabases(ctx, "twice_"+id+"_", local.ConnString(""), version))
			assert.Empty(t, existingDatabases(t, admin, drop))
			assert.Equal(t, slices.Sorted(slices.Values(slices.Concat(keep, other))), existingDatabases(t, admin, slices.Concat(keep, other)))
		})
	}
	err = dropRunDatabases(ctx, "twice_", local.ConnString(""), 0)
	require.Error(t, err)
	assert.Contains(t, blame.Message(err), `[twice] internal: refusing to drop databases with prefix "twice_"`)
}
