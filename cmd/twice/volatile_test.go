package main

import (
	"strings"
	"testing"
	"time"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/record"
	"github.com/runtwice/twice/internal/report"
)

// A passing check's volatile columns are named in summary.md and the
// HTML, not only in report.json, with the d.Now hint for a time column:
// a pass compares nothing there.
func TestPassNamesVolatileColumnsInEveryReport(t *testing.T) {
	const pkg = "example.com/jobs/stamped"
	events := strings.Join([]string{
		`{"Action":"start","Package":"` + pkg + `"}`,
		`{"Action":"run","Package":"` + pkg + `","Test":"TestStamped"}`,
		`{"Action":"pass","Package":"` + pkg + `","Test":"TestStamped","Elapsed":1}`,
		`{"Action":"pass","Package":"` + pkg + `","Elapsed":1}`,
	}, "\n") + "\n"
	runs := newTestRuns()
	if err := runs.read(strings.NewReader(events), nil); err != nil {
		t.Fatal(err)
	}
	sched, err := faults.Parse("j1a1w1 > j1a1w2")
	if err != nil {
		t.Fatal(err)
	}
	ref := &assert.Snapshot{Tables: []assert.Table{{Name: "orders", Columns: []assert.Column{
		{Name: "id", Type: "bigint"}, {Name: "token", Type: "uuid"}, {Name: "sent_at", Type: "timestamp with time zone"},
	}}}}
	res := &result.Result{Job: "stamped", Status: result.StatusIdempotent, Reference: ref,
		Warnings:  []result.Warning{{Kind: result.TransactionLeftOpen, Deliveries: 1, First: sched.Deliveries[0], Schedule: sched, Connections: 1}},
		Volatile:  []string{"orders.token", "orders.sent_at"},
		Scenarios: []result.Scenario{{Fault: faults.NameRunTwice, Schedule: sched, Verdict: result.Idempotent}}}
	recs := []record.Record{{Version: record.Version, Dir: "/src/stamped", Test: "TestStamped", Written: time.Now(), Result: res}}
	r := &report.Report{Command: "go test -json ./..."}
	(&builder{runs: runs, dirs: map[string]string{"/src/stamped": pkg}, cwd: "/src"}).build(r, recs)
	r.Finish()
	if len(r.Jobs) != 1 || r.Jobs[0].Status != report.StatusIdempotent {
		t.Fatalf("jobs = %+v, want one idempotent job", r.Jobs)
	}
	if got := r.Jobs[0].VolatileTimes; len(got) != 1 || got[0] != "orders.sent_at" {
		t.Errorf("VolatileTimes = %v, want [orders.sent_at]", got)
	}
	html, err := r.HTML()
	if err != nil {
		t.Fatal(err)
	}
	data, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	const warning = "returned with 1 connection still in a transaction or busy"
	for name, out := range map[string]string{"report.json": string(data), "index.html": string(html), "summary.md": r.Markdown()} {
		if !strings.Contains(out, warning) {
			t.Errorf("%s does not carry the open-transaction warning (%q)", name, warning)
		}
	}
	for name, out := range map[string]string{"index.html": string(html), "summary.md": r.Markdown()} {
		for _, want := range []string{"Left out as volatile", "orders.token", "sent", "holds a time: if the handler takes it from time.Now(), use d.Now"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s does not say %q", name, want)
			}
		}
	}
}
