package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/internal/pgserver"
	"github.com/runtwice/twice/internal/report"
)

// TestReportShowsKeptDatabaseOnURLServer: a failed check on a server of
// TWICE_DATABASE_URL keeps its database, and every report file a person
// reads names it (index.html, summary.md; issue 37).
func TestReportShowsKeptDatabaseOnURLServer(t *testing.T) {
	ctx := context.Background()
	srv, err := pgserver.Shared(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TWICE_POSTGRES", pgserver.ModeURL)
	t.Setenv("TWICE_DATABASE_URL", srv.ConnString("postgres"))
	t.Setenv(harness.KeepEnv, "true")
	dir := filepath.Join(t.TempDir(), "twice-report")
	var stdout, stderr bytes.Buffer
	code := run([]string{"report", "-o", dir, "./testdata/unexpected"}, &stdout, &stderr)
	t.Logf("twice report: exit %d\n%s%s", code, stderr.String(), stdout.String())
	r := readReport(t, dir)
	var kept []string
	for _, j := range r.Jobs {
		for _, f := range j.Findings {
			if f.Database != "" {
				kept = append(kept, f.Database)
			}
		}
	}
	t.Cleanup(func() { dropKept(t, srv.ConnString("postgres"), kept) })
	if code != report.ExitFindings || len(kept) == 0 {
		t.Fatalf("exit %d, kept databases %q: want 1 and one kept", code, kept)
	}
	for _, f := range []string{report.FileHTML, report.FileMarkdown, report.FileJSON} {
		data := mustRead(t, filepath.Join(dir, f))
		name := kept[0][strings.Index(kept[0], "twice_kept_"):]
		name = name[:strings.IndexAny(name+"' &", "' &")]
		if !bytes.Contains(data, []byte(name)) {
			t.Errorf("%s does not name the kept database %s", f, name)
		}
	}
}

// dropKept drops the databases the report's run kept: every
// twice_kept_<run ID>_N of the run IDs the kept connection strings name,
// since a run may keep more than the findings name (a confirming rerun's).
func dropKept(t *testing.T, url string, dsns []string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Error(err)
		return
	}
	defer func() { _ = conn.Close(ctx) }()
	runs := map[string]bool{}
	for _, d := range dsns {
		i := strings.Index(d, "twice_kept_")
		if i < 0 {
			continue
		}
		name := d[i+len("twice_kept_"):]
		if j := strings.IndexByte(name, '_'); j > 0 {
			runs[name[:j]] = true
		}
	}
	for run := range runs {
		rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE 'twice\_kept\_' || $1 || '\_%'`, run)
		if err != nil {
			t.Error(err)
			return
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Error(err)
			return
		}
		for _, name := range names {
			if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %q WITH (FORCE)", name)); err != nil {
				t.Error(err)
			}
		}
	}
}
