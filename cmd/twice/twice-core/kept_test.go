package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/internal/evidence"
	"github.com/runtwice/twice/internal/pgserver"
)

// TestKeptListsAndDrops: twice kept lists the kept databases of
// TWICE_DATABASE_URL's server and the dump files, and -drop removes them
// and nothing that is merely named alike.
func TestKeptListsAndDrops(t *testing.T) {
	if m := os.Getenv("TWICE_POSTGRES"); m != "" && m != pgserver.ModeLocal {
		t.Skip("needs local server binaries for a private server")
	}
	ctx := context.Background()
	srv, err := pgserver.Start(ctx, pgserver.Config{Mode: pgserver.ModeLocal})
	if err != nil {
		t.Skipf("no private local server: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	admin, err := pgx.Connect(ctx, srv.ConnString(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close(ctx) })
	kept := []string{"twice_kept_0123abcd_1", "twice_kept_0123abcd_2"}
	foreign := []string{"twice_kept_notes", "twice_0123abcd_d1", "twice_kept_0123abcd_2x"}
	for _, n := range append(append([]string{}, kept...), foreign...) {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{n}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("TMPDIR", t.TempDir())
	t.Setenv("TWICE_POSTGRES", "")
	t.Setenv("TWICE_DATABASE_URL", srv.ConnString(""))
	dump := evidence.DumpFile("twice_kept_89abcdef_3")
	other := filepath.Join(evidence.Dir(), "notes.sql")
	for _, f := range []string{dump, other} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("SELECT 1;\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	var stdout, stderr bytes.Buffer
	// Two runs' evidence: -all acts on both.
	if code := run([]string{"kept", "-all"}, &stdout, &stderr); code != 0 {
		t.Fatalf("twice kept: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range append(append([]string{}, kept...), dump, "createdb twice_kept_89abcdef_3") {
		if !strings.Contains(out, want) {
			t.Errorf("twice kept does not list %s:\n%s", want, out)
		}
	}
	for _, n := range append(foreign, other) {
		if strings.Contains(out, n+"\t") || strings.Contains(out, n+"\n") {
			t.Errorf("twice kept lists %s, which is not kept evidence:\n%s", n, out)
		}
	}

	stdout.Reset()
	if code := run([]string{"kept", "-drop", "-all"}, &stdout, &stderr); code != 0 {
		t.Fatalf("twice kept -drop: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	var left []string
	rows, _ := admin.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE 'twice%' ORDER BY 1`)
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(left, " "), "twice_0123abcd_d1 twice_kept_0123abcd_2x twice_kept_notes"; got != want {
		t.Errorf("databases left after -drop: %s, want %s", got, want)
	}
	if _, err := os.Stat(dump); !os.IsNotExist(err) {
		t.Errorf("the dump %s is still there (%v)", dump, err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("-drop removed %s, which is not a dump of a kept database: %v", other, err)
	}
}

// TestKeptRefusesOtherNames: a name that is not a kept database's is
// refused before anything is touched.
func TestKeptRefusesOtherNames(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"kept", "-drop", "postgres"}, &stdout, &stderr); code != 2 {
		t.Fatalf("exit %d, want 2\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), `"postgres" is not the name of a kept database`) {
		t.Errorf("unexpected message: %s", stderr.String())
	}
}

// TestKeptActsOnOneRun: dumps lie in a directory per run, and twice kept
// lists and drops the latest run's only, unless told -run ID or -all: one
// run's -drop leaves another's evidence.
func TestKeptActsOnOneRun(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	t.Setenv("TWICE_DATABASE_URL", "")
	older, newer := evidence.DumpFile("twice_kept_0000000a_1"), evidence.DumpFile("twice_kept_0000000b_1")
	if filepath.Dir(older) == filepath.Dir(newer) {
		t.Fatalf("two runs' dumps share a directory: %s, %s", older, newer)
	}
	for i, f := range []string{older, newer} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("SELECT 1;\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(time.Duration(i-2) * time.Hour)
		if err := os.Chtimes(f, at, at); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"kept"}, &stdout, &stderr); code != 0 {
		t.Fatalf("twice kept: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	if out := stdout.String(); !strings.Contains(out, newer) || strings.Contains(out, older+"\t") || !strings.Contains(out, "-all") {
		t.Errorf("twice kept does not list the latest run's dump alone, pointing at -all:\n%s", out)
	}
	stdout.Reset()
	if code := run([]string{"kept", "-drop"}, &stdout, &stderr); code != 0 {
		t.Fatalf("twice kept -drop: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	if _, err := os.Stat(newer); !os.IsNotExist(err) {
		t.Errorf("-drop left the latest run's dump %s (%v)", newer, err)
	}
	if _, err := os.Stat(older); err != nil {
		t.Errorf("-drop removed another run's dump %s: %v", older, err)
	}
	stdout.Reset()
	if code := run([]string{"kept", "-drop", "-all"}, &stdout, &stderr); code != 0 {
		t.Fatalf("twice kept -drop -all: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	if _, err := os.Stat(older); !os.IsNotExist(err) {
		t.Errorf("-drop -all left %s (%v)", older, err)
	}
}
