package freshdb_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runtwice/twice/internal/freshdb"
	"github.com/runtwice/twice/internal/pgserver"
)

func TestCleanStale(t *testing.T) {
	ctx := context.Background()
	srv := server(t)
	admin := srv.ConnString("postgres")
	if _, err := freshdb.CleanStale(ctx, srv); err != nil { // starts this run
		t.Fatal(err)
	}
	// The dead run's ID starts with a letter, so that its upper-case
	// spelling below is another name: an ID of digits only (2% of random
	// ones, e.g. 16036132) made the same name twice, and CREATE DATABASE
	// failed with "already exists".
	dead, live := "d"+randomHex(t, 8)[1:], randomHex(t, 8)

	// A live run on another machine: it holds its lock on its own session.
	liveConn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer liveConn.Close(ctx)
	if _, err := liveConn.Exec(ctx, "SELECT pg_advisory_lock($1::int4, $2::bigint::bit(32)::int4)",
		int32(freshdb.LockClass), int64(freshdb.RunKey(live))); err != nil {
		t.Fatal(err)
	}

	deadDBs := []string{"twice_" + dead + "_d1", "twice_" + dead + "_t0123456789abcdef"}
	liveDBs := []string{"twice_" + live + "_d1"}
	// Names a dead run could have made, without its marker: someone
	// else's (twice_deadbeef_d1), or marked as another run's.
	lookalike, wrongMarker := "twice_"+randomHex(t, 8)+"_d1", "twice_"+dead+"_d2"
	otherDBs := []string{
		lookalike,
		wrongMarker,
		"twice_kept_" + dead + "_1",              // kept by a dead run
		"twice_" + dead,                          // no suffix
		"xtwice_" + dead + "_d1",                 // other prefix
		"twice_" + strings.ToUpper(dead) + "_d1", // not our spelling
		"twice_" + dead + "_d1_extra",            // longer
		"app_" + dead,
	}
	all := slices.Concat(deadDBs, liveDBs, otherDBs)
	for _, name := range all {
		run(t, admin, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	}
	mark := func(name, id string) {
		run(t, admin, "COMMENT ON DATABASE "+pgx.Identifier{name}.Sanitize()+" IS '"+freshdb.RunMarker(id)+"'")
	}
	for _, name := range deadDBs {
		mark(name, dead)
	}
	mark(liveDBs[0], live)
	mark(wrongMarker, live)
	defer func() {
		for _, name := range all {
			run(t, admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize())
		}
	}()

	dropped, err := freshdb.CleanStale(ctx, srv)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(deadDBs)
	if diff := cmp.Diff(deadDBs, dropped); diff != "" {
		t.Errorf("CleanStale dropped mismatch (-want +got):\n%s", diff)
	}
	for _, name := range deadDBs {
		if databaseExists(t, srv, name) {
			t.Errorf("dead run's database %s still exists", name)
		}
	}
	for _, name := range slices.Concat(liveDBs, otherDBs) {
		if !databaseExists(t, srv, name) {
			t.Errorf("database %s was dropped, want it kept", name)
		}
	}

	// The live run dies: its databases go next time.
	liveConn.Close(ctx)
	waitNoSessionOfLock(t, admin, freshdb.RunKey(live))
	dropped, err = freshdb.CleanStale(ctx, srv)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(liveDBs, dropped); diff != "" {
		t.Errorf("CleanStale after the run died dropped mismatch (-want +got):\n%s", diff)
	}
	for _, name := range otherDBs {
		if !databaseExists(t, srv, name) {
			t.Errorf("database %s was dropped, want it kept", name)
		}
	}
}

// TestCleanStaleLeavesOtherRoles: on a server shared by roles, a run
// cleans up the dead runs' databases its role owns and leaves those of
// another role alone, without an error: before, a run as a plain role
// failed every check with "must be owner" when a superuser's run had just
// died there.
func TestCleanStaleLeavesOtherRoles(t *testing.T) {
	if os.Getenv(cleanHelperEnv) != "" {
		t.Skip("the parent of TestHelperCleanStale")
	}
	srv := server(t)
	admin := srv.ConnString("postgres")
	role, secret := "twice_plain_"+randomHex(t, 8), "pw-"+randomHex(t, 8)
	run(t, admin, fmt.Sprintf("CREATE ROLE %s LOGIN CREATEDB PASSWORD '%s'", role, secret))
	dead := randomHex(t, 8)
	mine, theirs := "twice_"+dead+"_d1", "twice_"+dead+"_d2"
	run(t, admin, "CREATE DATABASE "+mine+" OWNER "+role)
	run(t, admin, "CREATE DATABASE "+theirs)
	t.Cleanup(func() {
		run(t, admin, "DROP DATABASE IF EXISTS "+mine)
		run(t, admin, "DROP DATABASE IF EXISTS "+theirs)
		run(t, admin, "DROP ROLE IF EXISTS "+role)
	})
	for _, name := range []string{mine, theirs} {
		run(t, admin, "COMMENT ON DATABASE "+name+" IS '"+freshdb.RunMarker(dead)+"'")
	}

	cfg, err := pgconn.ParseConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	u := url.URL{Scheme: "postgres", User: url.UserPassword(role, secret), Path: "/postgres"}
	q := url.Values{"sslmode": {"disable"}}
	if strings.HasPrefix(cfg.Host, "/") {
		q.Set("host", cfg.Host)
		q.Set("port", strconv.Itoa(int(cfg.Port)))
	} else {
		u.Host = fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
	}
	u.RawQuery = q.Encode()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCleanStale$", "-test.v")
	cmd.Env = append(os.Environ(), cleanHelperEnv+"=1", "TWICE_POSTGRES=url", "TWICE_DATABASE_URL="+u.String())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("a run as role %s failed: %v\n%s", role, err, out)
	}
	if databaseExists(t, srv, mine) {
		t.Errorf("the dead run's database %s, owned by %s, is still there after a run as %s", mine, role, role)
	}
	if !databaseExists(t, srv, theirs) {
		t.Errorf("a run as %s dropped %s, which another role owns", role, theirs)
	}
}

// cleanHelperEnv makes TestHelperCleanStale run.
const cleanHelperEnv = "TWICE_FRESHDB_TEST_CLEAN"

// TestHelperCleanStale starts a run in URL mode, which cleans up dead runs
// first, and cleans up once more.
func TestHelperCleanStale(t *testing.T) {
	if os.Getenv(cleanHelperEnv) == "" {
		t.Skip("helper for TestCleanStaleLeavesOtherRoles")
	}
	srv, err := pgserver.Shared(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dropped, err := freshdb.CleanStale(context.Background(), srv)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dropped %v", dropped)
}

// waitNoSessionOfLock waits until the server has released a closed
// session's advisory lock (the backend exits after the client closes).
func waitNoSessionOfLock(t *testing.T, admin string, key uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := connect(t, admin)
	for {
		var n int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::bigint::oid AND objid = $2::bigint::oid",
			int64(freshdb.LockClass), int64(key)).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestForeignDatabaseUntouched runs everything this package does next to a
// database it did not create and checks that database byte for byte.
func TestForeignDatabaseUntouched(t *testing.T) {
	ctx := context.Background()
	srv := server(t)
	admin := srv.ConnString("postgres")
	foreign := "app_orders_" + randomHex(t, 8)
	run(t, admin, "CREATE DATABASE "+foreign)
	defer run(t, admin, "DROP DATABASE IF EXISTS "+foreign)
	run(t, srv.ConnString(foreign), `
		CREATE TABLE customers (id serial PRIMARY KEY, email text UNIQUE);
		CREATE TABLE orders (id serial PRIMARY KEY, customer_id int REFERENCES customers, total numeric);
		INSERT INTO customers (email) VALUES ('prod@example.com'), ('vip@example.com');
		INSERT INTO orders (customer_id, total) VALUES (1, 84000), (2, 12.5);
		CREATE VIEW big AS SELECT * FROM orders WHERE total > 1000;`)
	sessionsOpened := 1 // the exec above

	pgDump := findPgDump(t)
	dump := func() string {
		t.Helper()
		var b strings.Builder
		b.WriteString(dumpContent(t, srv.ConnString(foreign)))
		if pgDump != "" {
			out, err := exec.Command(pgDump, "--no-sync", "-d", srv.ConnString(foreign)).Output()
			if err != nil {
				t.Fatalf("pg_dump: %v", err)
			}
			for line := range strings.Lines(string(out)) {
				// a random key per dump (pg_dump 15.14+), not content
				if !strings.HasPrefix(line, `\restrict `) && !strings.HasPrefix(line, `\unrestrict `) {
					b.WriteString(line)
				}
			}
		}
		return b.String()
	}
	before := dump()
	sessionsOpened++
	if pgDump != "" {
		sessionsOpened++
	}
	catalogBefore := databaseRow(t, admin, foreign)
	// Session statistics reach pg_stat_database when a session ends; wait
	// for the test's own sessions to be counted before taking the baseline.
	baseline := waitSessions(t, admin, foreign, sessionsOpened)

	// Everything this package does: build templates (one new), hand out,
	// change, give back (reset and drop paths), keep, clean stale
	// databases, drop all.
	steps := slices.Clone(fixture)
	steps = append(steps, freshdb.Step{Name: "SQL", SQL: "-- foreign test " + randomHex(t, 8)})
	tpl, err := freshdb.Prepare(ctx, srv, steps)
	if err != nil {
		t.Fatal(err)
	}
	d1, err := tpl.Fresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := freshdb.Variant(tpl, "clone", "FILE_COPY").Fresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d3, err := tpl.Fresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	run(t, d1.ConnString, scribble)
	run(t, d2.ConnString, "ALTER TABLE customers ADD COLUMN x int")
	for _, d := range []*freshdb.Database{d1, d2} {
		if err := d.Drop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := d3.Keep(ctx); err != nil {
		t.Fatal(err)
	}
	defer run(t, admin, "DROP DATABASE IF EXISTS "+d3.Name)
	if _, err := freshdb.CleanStale(ctx, srv); err != nil {
		t.Fatal(err)
	}
	if err := (&freshdb.Database{Name: foreign}).Drop(ctx); err == nil {
		t.Error("Drop of the foreign database succeeded")
	}
	if err := freshdb.DropAll(ctx); err != nil {
		t.Fatal(err)
	}
	if left := databasesWithPrefix(t, admin, freshdb.RunPrefix()); len(left) > 0 {
		t.Errorf("after DropAll, databases with prefix %s remain: %v", freshdb.RunPrefix(), left)
	}

	if n := activeSessions(t, admin, foreign); n != 0 {
		t.Errorf("%d sessions are connected to foreign database %s, want 0", n, foreign)
	}
	if got := sessionCount(t, admin, foreign); got != baseline {
		t.Errorf("pg_stat_database.sessions of %s = %d, want %d (someone connected to it)", foreign, got, baseline)
	}
	if diff := cmp.Diff(catalogBefore, databaseRow(t, admin, foreign)); diff != "" {
		t.Errorf("pg_database row of %s changed (-before +after):\n%s", foreign, diff)
	}
	if diff := cmp.Diff(before, dump()); diff != "" {
		t.Errorf("foreign database %s changed (-before +after):\n%s", foreign, diff)
	}
}

// findPgDump finds a pg_dump for the server's major version, or "".
func findPgDump(t *testing.T) string {
	t.Helper()
	paths, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_dump")
	sort.Strings(paths)
	if len(paths) > 0 {
		return paths[len(paths)-1]
	}
	if p, err := exec.LookPath("pg_dump"); err == nil {
		return p
	}
	t.Log("no pg_dump found: comparing the query-based dump only")
	return ""
}

func queryOne[T any](t *testing.T, connString, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := connect(t, connString).QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func databaseRow(t *testing.T, admin, name string) string {
	return queryOne[string](t, admin, "SELECT d::text FROM pg_database d WHERE datname = $1", name)
}

func activeSessions(t *testing.T, admin, name string) int64 {
	return queryOne[int64](t, admin, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name)
}

func sessionCount(t *testing.T, admin, name string) int64 {
	return queryOne[int64](t, admin, "SELECT sessions FROM pg_stat_database WHERE datname = $1", name)
}

func waitSessions(t *testing.T, admin, name string, want int) int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := sessionCount(t, admin, name)
		if got >= int64(want) && activeSessions(t, admin, name) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("pg_stat_database.sessions of %s stays %d, want %d: are statistics off?", name, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func databasesWithPrefix(t *testing.T, admin, prefix string) []string {
	t.Helper()
	rows, err := connect(t, admin).Query(context.Background(), "SELECT datname FROM pg_database WHERE starts_with(datname, $1) ORDER BY 1", prefix)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestDropAllBesideATemplateBuild ends the runs while a template is still
// being built: DropAll must leave the build's result alone until its
// builder is done with it (under -race, reading it before is a data
// race), and drop what the run owns.
func TestDropAllBesideATemplateBuild(t *testing.T) {
	ctx := context.Background()
	srv := server(t)
	finish, err := freshdb.TemplateBuilding(ctx, srv, "building "+randomHex(t, 8))
	if err != nil {
		t.Fatal(err)
	}
	built := make(chan struct{})
	go func() {
		defer close(built)
		finish(&freshdb.Template{Name: "built meanwhile"})
	}()
	if err := freshdb.DropAll(ctx); err != nil {
		t.Fatal(err)
	}
	<-built
}
