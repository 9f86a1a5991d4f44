package report_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/golden"
	"github.com/runtwice/twice/internal/report"
)

// fixture is the report cmd/twice builds from its testdata (its
// TestBuildFixture writes testdata/input.json): real records of the
// bundled examples, an unexpected finding, a build failure, a crash.
func fixture(t *testing.T) *report.Report {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "input.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r report.Report
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

func TestGolden(t *testing.T) {
	r := fixture(t)
	html, err := r.HTML()
	if err != nil {
		t.Fatal(err)
	}
	junit, err := r.JUnit()
	if err != nil {
		t.Fatal(err)
	}
	js, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	golden.Equal(t, "summary.md.golden", r.Markdown())
	golden.Equal(t, "junit.xml.golden", string(junit))
	golden.Equal(t, "index.html.golden", string(html))
	// report.json round-trips: what twice wrote is what a reader gets.
	golden.Equal(t, "input.json", string(js))
}

// TestJUnitValidates checks junit.xml against the schema CI systems read
// (testdata/junit.xsd) with xmllint, from Debian's libxml2-utils.
func TestJUnitValidates(t *testing.T) {
	xmllint, err := exec.LookPath("xmllint")
	if err != nil {
		t.Skip("xmllint not found: install Debian's libxml2-utils (apt-get install libxml2-utils) to validate junit.xml")
	}
	junit, err := fixture(t).JUnit()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "junit.xml")
	if err := os.WriteFile(path, junit, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(xmllint, "--noout", "--schema", filepath.Join("testdata", "junit.xsd"), path).CombinedOutput()
	if err != nil {
		t.Fatalf("junit.xml does not validate: %v\n%s", err, out)
	}
	// The schema itself must reject what CI systems reject, or the check
	// above proves nothing.
	bad := strings.Replace(string(junit), ` classname="`, ` class="`, 1)
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(xmllint, "--noout", "--schema", filepath.Join("testdata", "junit.xsd"), path).CombinedOutput(); err == nil {
		t.Errorf("a testcase without classname validates:\n%s", out)
	}
}

func TestJUnitCounts(t *testing.T) {
	r := fixture(t)
	data, err := r.JUnit()
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, want := range []string{
		// The unexpected finding fails its cells, the expected one passes.
		`<testcase name="TestAdvanceUnmarked/run-twice" classname="github.com/runtwice/twice/examples/orderstatus" time="0.060">`,
		`<failure message="job &#34;advance-status&#34;: 1 of 1 run-twice scenarios are not idempotent" type="finding">`,
		// A cell's time is its scenarios' recorded duration.
		`<testcase name="TestRewardByIncrement/run-twice" classname="github.com/runtwice/twice/examples/loyalty" time="0.083">`,
		`<error message="[twice] example.com/jobs/broken does not compile`,
		`<skipped message="[twice] example.com/jobs/plain: no test called harness.Check`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("junit.xml lacks %s", want)
		}
	}
}

func TestWriteReplacesWhole(t *testing.T) {
	r := fixture(t)
	dir := filepath.Join(t.TempDir(), "twice-report")
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	// A report file of the previous run, since dropped, goes with it.
	if err := os.Remove(filepath.Join(dir, "junit.xml")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.md"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got, want := strings.Join(names, " "), ".twice-report index.html junit.xml report.json summary.md"; got != want {
		t.Errorf("report directory holds %s, want %s", got, want)
	}
	if md, _ := os.ReadFile(filepath.Join(dir, "summary.md")); string(md) == "old" {
		t.Error("summary.md is the old one")
	}
	siblings, err := os.ReadDir(filepath.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	if len(siblings) != 1 {
		t.Errorf("Write left %d entries next to the report, want only the report", len(siblings))
	}
}

func TestWriteFailureKeepsOldReport(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores directory permissions")
	}
	parent := t.TempDir()
	dir := filepath.Join(parent, "twice-report")
	if err := fixture(t).Write(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, 0o555); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(parent, 0o755)
	err := fixture(t).Write(dir)
	if err == nil || !strings.HasPrefix(blame.Message(err), "[twice] internal: ") {
		t.Fatalf("Write into a read-only directory: error %v, want one of twice's own", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "index.html")); err != nil {
		t.Errorf("the old report is gone: %v", err)
	}
}

// TestKeptDatabasesAreNamed: a kept database is named on both pages,
// also when its finding is not shown because another shows the same
// difference (issue 37).
func TestKeptDatabasesAreNamed(t *testing.T) {
	const (
		shownDB = "postgres://u@db/twice_kept_0a0a0a0a_1"
		sameDB  = "postgres://u@db/twice_kept_0a0a0a0a_2"
		dump    = "/tmp/twice-kept-0/0a0a0a0a/twice_kept_0a0a0a0a_3.sql"
	)
	r := &report.Report{Command: "go test -json ./...", Jobs: []report.Job{{
		Name: "add-points", Package: "example.com/jobs", Test: "TestAdd", Outcome: report.OutcomeFinding, Scenarios: 3, Failed: 3,
		Cells: []report.Cell{{Fault: "run-twice", Outcome: report.OutcomeFinding, Scenarios: 3, Failed: 3}},
		Findings: []report.Finding{
			{Fault: "run-twice", Schedule: "j1a1w1 > j1a2w2", Outcome: report.OutcomeFinding, Database: shownDB},
			{Fault: "crash-before-ack", Schedule: "j1a1w1!crash > +30s j1a2w2", Outcome: report.OutcomeFinding, SameAs: "j1a1w1 > j1a2w2", Database: sameDB},
			{Fault: "crash-before-ack", Schedule: "j1a1w1!crash:1 > +30s j1a2w2", Outcome: report.OutcomeFinding, SameAs: "j1a1w1 > j1a2w2", Dump: dump},
		},
	}}}
	r.Faults = report.FaultsOf(r.Jobs)
	r.Finish()
	html, err := r.HTML()
	if err != nil {
		t.Fatal(err)
	}
	pages := map[string]string{"index.html": string(html), "summary.md": r.Markdown()}
	for page, text := range pages {
		for _, want := range []string{shownDB, sameDB, dump} {
			if !strings.Contains(text, want) {
				t.Errorf("%s does not name %s", page, want)
			}
		}
	}
}
