package twicegue_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	twicegue "github.com/runtwice/twice/adapters/gue"
)

// The schema a gue job carries is gue's own migrations/schema.sql, of the
// gue version this module builds with.
func TestSchemaIsGues(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}} {{.Dir}}", "github.com/vgarvardt/gue/v5").Output()
	if err != nil {
		t.Fatalf("locating gue's module: %v", err)
	}
	version, dir, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if version != "v5.8.0" {
		t.Fatalf("gue version = %q, want v5.8.0 (update schema.sql from its migrations/schema.sql with it)", version)
	}
	want, err := os.ReadFile(filepath.Join(dir, "migrations", "schema.sql"))
	if err != nil {
		t.Fatal(err)
	}
	job := twicegue.Job("schema", twicegue.Spec[int]{Type: "schema"}, nil)
	if got := job.Queue.Schema(); got.SQL != string(want) || got.Apply != nil {
		t.Errorf("schema.sql differs from gue %s's migrations/schema.sql", version)
	}
}
