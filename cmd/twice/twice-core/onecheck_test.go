package main

import (
	"strings"
	"testing"
	"time"

	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/record"
	"github.com/runtwice/twice/internal/report"
)

// oneCheckReport is the report the runner makes of one package whose one
// test ran one check with result res: go test's events (the test passed
// or failed, having printed output), then the check's record.
func oneCheckReport(t *testing.T, pkg, test, output string, passed bool, res *result.Result) *report.Report {
	t.Helper()
	action := map[bool]string{true: "pass", false: "fail"}[passed]
	lines := []string{
		`{"Action":"start","Package":"` + pkg + `"}`,
		`{"Action":"run","Package":"` + pkg + `","Test":"` + test + `"}`,
	}
	if output != "" {
		lines = append(lines, `{"Action":"output","Package":"`+pkg+`","Test":"`+test+`","Output":"`+output+`\n"}`)
	}
	lines = append(lines,
		`{"Action":"`+action+`","Package":"`+pkg+`","Test":"`+test+`","Elapsed":1}`,
		`{"Action":"`+action+`","Package":"`+pkg+`","Elapsed":1}`)
	runs := newTestRuns()
	if err := runs.read(strings.NewReader(strings.Join(lines, "\n")+"\n"), nil); err != nil {
		t.Fatal(err)
	}
	dir := "/src/" + test
	recs := []record.Record{{Version: record.Version, Dir: dir, Test: test, Rerun: "go test -run '^" + test + "$' .", Written: time.Now(), Result: res}}
	r := &report.Report{Command: "go test -json ./..."}
	(&builder{runs: runs, dirs: map[string]string{dir: pkg}, cwd: "/src"}).build(r, recs)
	r.Finish()
	return r
}

// outputs are r's four files by name, as the runner writes them.
func outputs(t *testing.T, r *report.Report) map[string]string {
	t.Helper()
	data, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	html, err := r.HTML()
	if err != nil {
		t.Fatal(err)
	}
	junit, err := r.JUnit()
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{"report.json": string(data), "index.html": string(html), "summary.md": r.Markdown(), "junit.xml": string(junit)}
}
