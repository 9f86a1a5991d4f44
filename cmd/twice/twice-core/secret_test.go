package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/internal/pgserver"
)

// TestReportHidesThePassword: in URL mode with a password, a failed check
// names its database by a connection string, and none of what twice prints
// or writes (its output, every report file, the test's own log under go
// test -v) carries the password.
func TestReportHidesThePassword(t *testing.T) {
	ctx := context.Background()
	srv, err := pgserver.Shared(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, srv.ConnString(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close(ctx) })
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	role, secret := "twice_pw_"+hex.EncodeToString(b), "pw-"+hex.EncodeToString(b)+"-secret"
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN CREATEDB PASSWORD '%s'", role, secret)); err != nil {
		t.Skipf("cannot make a role with a password on this server: %v", err)
	}
	t.Cleanup(func() { dropRole(t, admin, role) })

	cfg, err := pgconn.ParseConfig(srv.ConnString("postgres"))
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
	t.Setenv("TWICE_POSTGRES", pgserver.ModeURL)
	t.Setenv("TWICE_DATABASE_URL", u.String())
	t.Setenv(harness.KeepEnv, "true")

	dir := filepath.Join(t.TempDir(), "twice-report")
	var stdout, stderr bytes.Buffer
	code := run([]string{"report", "-o", dir, "./testdata/unexpected"}, &stdout, &stderr)
	out := stdout.String() + stderr.String()
	t.Logf("twice report: exit %d\n%s", code, out)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (an unexpected finding)", code)
	}
	if strings.Contains(out, secret) {
		t.Errorf("twice's output carries the password")
	}
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte(secret)) {
			t.Errorf("%s carries the password", f.Name())
		}
		if f.Name() == "report.json" {
			// The failed scenario's database is in it, by a connection
			// string that names the role: something that could leak.
			if !bytes.Contains(data, []byte(role)) {
				t.Errorf("report.json does not name the role %s: it shows no connection string, so the test proves nothing", role)
			}
		}
	}

	// The test log a user reads (and CI keeps) has the kept database's
	// psql line.
	goBin, err := findGo()
	if err != nil {
		t.Fatal(err)
	}
	log, _ := exec.Command(goBin, "test", "-v", "-count=1", "./testdata/unexpected").CombinedOutput() // fails by design
	if !bytes.Contains(log, []byte("as evidence")) || !bytes.Contains(log, []byte(role)) {
		t.Fatalf("go test -v logged no kept database's connection string for role %s, so the test proves nothing:\n%s", role, log)
	}
	if bytes.Contains(log, []byte(secret)) {
		t.Errorf("go test -v's log carries the password:\n%s", log)
	}
}

// dropRole drops role once the databases it owns are gone: the runs that
// made them drop them when they exit, a moment after.
func dropRole(t *testing.T, admin *pgx.Conn, role string) {
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute) // a bound, not a timing assertion
	for {
		rows, _ := admin.Query(ctx, `SELECT datname FROM pg_database WHERE datdba = (SELECT oid FROM pg_roles WHERE rolname = $1)`, role)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Error(err)
			return
		}
		for _, n := range names {
			if strings.HasPrefix(n, "twice_kept_") {
				_, _ = admin.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %q WITH (FORCE)", n))
			}
		}
		if len(names) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("databases %v of role %s are still there", names, role)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := admin.Exec(ctx, "DROP ROLE "+role); err != nil {
		t.Error(err)
	}
}

// TestReportHidesEverySetting plants a distinct password in every
// connection setting twice or its adapters read, as each is given
// (a URL, keyword/value pairs, a flag, a value that does not parse),
// runs twice report where each is read and shown, and finds none of the
// passwords in its stdout, its stderr or any file of the report (issue 37).
func TestReportHidesEverySetting(t *testing.T) {
	tag := randomHex(t)
	pw := func(what string) string { return what + "Pw" + tag }
	for _, tt := range []struct {
		name string
		env  map[string]string
		args []string // before the packages
		pkgs []string
		// shown must appear in the output, so the run shows the setting
		// (or what was read of it) and the test proves something.
		shown string
	}{
		{name: "postgres URL and PGPASSWORD",
			env: map[string]string{"TWICE_POSTGRES": "url", "TWICE_DATABASE_URL": "postgres://twice_u:" + pw("PgUrl") + "@127.0.0.1:1/postgres?sslmode=disable",
				"PGPASSWORD": pw("PgEnv")},
			pkgs: []string{"./testdata/unexpected"}, shown: `as user "twice_u"`},
		{name: "postgres keyword value by flag",
			args: []string{"-twice.postgres=url", "-twice.database_url=host=127.0.0.1 port=1 user=twice_kv password=" + pw("PgKv") + " sslmode=disable"},
			pkgs: []string{"./testdata/unexpected"}, shown: `as user "twice_kv"`},
		{name: "postgres malformed",
			env:  map[string]string{"TWICE_POSTGRES": "url", "TWICE_DATABASE_URL": "postgres//twice:" + pw("PgBad") + "@127.0.0.1:1"},
			pkgs: []string{"./testdata/unexpected"}, shown: "is not a PostgreSQL connection string"},
		{name: "redis URL, kafka brokers, nats and a provider key",
			env: map[string]string{"TWICE_POSTGRES": "local",
				"TWICE_REDIS_URL":     "redis://user:" + pw("Redis") + "@127.0.0.1:1/0",
				"TWICE_KAFKA_BROKERS": "user:" + pw("Kafka") + "@127.0.0.1:1",
				"TWICE_NATS_URL":      "nats://user:" + pw("Nats") + "@127.0.0.1:1",
				"TWICE_STRIPE_KEY":    "sk_test_" + pw("Stripe")},
			pkgs: []string{"../../../adapters/asynq/example/rewards", "../../../adapters/kafka/example/orders"}, shown: "TWICE_REDIS_URL=redis://user@127.0.0.1:1/0"},
		{name: "redis malformed",
			env:  map[string]string{"TWICE_POSTGRES": "local", "TWICE_REDIS_URL": "redis//nonsense:" + pw("RedisBad")},
			pkgs: []string{"../../../adapters/asynq/example/rewards"}, shown: "TWICE_REDIS_URL=(a value that does not parse"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			dir := filepath.Join(t.TempDir(), "twice-report")
			var stdout, stderr bytes.Buffer
			args := append(append([]string{"report", "-o", dir, "-run", "^Test"}, tt.args...), tt.pkgs...)
			code := run(args, &stdout, &stderr)
			t.Logf("twice report: exit %d\n%s%s", code, stderr.String(), stdout.String())
			outputs := map[string][]byte{"stdout": stdout.Bytes(), "stderr": stderr.Bytes()}
			files, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				outputs[f.Name()] = mustRead(t, filepath.Join(dir, f.Name()))
			}
			if len(files) < 4 {
				t.Errorf("the report holds %d files, want all four", len(files))
			}
			for name, data := range outputs {
				if bytes.Contains(data, []byte(tag)) {
					t.Errorf("%s carries a planted password: %s", name, bytes.TrimSpace(lineWith(data, tag)))
				}
			}
			if !bytes.Contains(stdout.Bytes(), []byte(tt.shown)) {
				t.Errorf("stdout lacks %q: the run did not show the setting, so the test proves nothing", tt.shown)
			}
		})
	}
}

func lineWith(data []byte, s string) []byte {
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if bytes.Contains(line, []byte(s)) {
			return line
		}
	}
	return nil
}
