package main

import (
	"strings"
	"testing"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/report"
)

// A passing check's volatile columns are named in summary.md and the
// HTML, not only in report.json, with the d.Now hint for a time column:
// a pass compares nothing there.
func TestPassNamesVolatileColumnsInEveryReport(t *testing.T) {
	sched, err := faults.Parse("j1a1w1 > j1a1w2")
	if err != nil {
		t.Fatal(err)
	}
	ref := &assert.Snapshot{Tables: []assert.Table{{Name: "orders", Columns: []assert.Column{
		{Name: "id", Type: "bigint"}, {Name: "token", Type: "uuid"}, {Name: "sent_at", Type: "timestamp with time zone"},
	}}}}
	res := &result.Result{Job: "stamped", Outcome: result.OutcomeIdempotent, Reference: ref,
		Warnings:  []result.Warning{{Kind: result.TransactionLeftOpen, Deliveries: 1, First: sched.Deliveries[0], Schedule: sched, Connections: 1}},
		Volatile:  []string{"orders.token", "orders.sent_at"},
		Scenarios: []result.Scenario{{Fault: faults.NameRunTwice, Schedule: sched, Verdict: result.Idempotent}}}
	r := oneCheckReport(t, "example.com/jobs/stamped", "TestStamped", "", true, res)
	if len(r.Jobs) != 1 || r.Jobs[0].Outcome != report.OutcomeIdempotent {
		t.Fatalf("jobs = %+v, want one idempotent job", r.Jobs)
	}
	if got := r.Jobs[0].VolatileTimes; len(got) != 1 || got[0] != "orders.sent_at" {
		t.Errorf("VolatileTimes = %v, want [orders.sent_at]", got)
	}
	out := outputs(t, r)
	const warning = "returned with 1 connection still in a transaction or busy"
	for _, name := range []string{"report.json", "index.html", "summary.md"} {
		if !strings.Contains(out[name], warning) {
			t.Errorf("%s does not carry the open-transaction warning (%q)", name, warning)
		}
	}
	for _, name := range []string{"index.html", "summary.md"} {
		for _, want := range []string{"Left out as volatile", "orders.token", "sent", "holds a time: if the handler takes it from time.Now(), use d.Now"} {
			if !strings.Contains(out[name], want) {
				t.Errorf("%s does not say %q", name, want)
			}
		}
	}
}

// The warnings of issue 27's remainder (clean runs that disagree beyond
// volatile columns, a DSN connection left open) reach every report, as
// the open-transaction warning does.
func TestNewWarningsInEveryReport(t *testing.T) {
	sched, err := faults.Parse("j1a1w1 > j1a1w2")
	if err != nil {
		t.Fatal(err)
	}
	res := &result.Result{Job: "odd", Outcome: result.OutcomeIdempotent,
		Warnings: []result.Warning{
			{Kind: result.CleanRunsDisagree, Disagreement: &result.Disagreement{Rows: []result.RunCounts{{Name: "marks", Runs: [2]int{1, 0}}}}},
			{Kind: result.ConnectionLeftOpen, Deliveries: 1, First: sched.Deliveries[0], Schedule: sched, Connections: 1},
		},
		Scenarios: []result.Scenario{{Fault: faults.NameRunTwice, Schedule: sched, Verdict: result.Idempotent}}}
	r := oneCheckReport(t, "example.com/jobs/odd", "TestOdd", "", true, res)
	out := outputs(t, r)
	for _, warning := range []string{
		`its two clean reference runs disagree beyond volatile columns: table "marks" has 1 row in the first, 0 in the second`,
		"returned with 1 connection it opened on d.DSN still open",
	} {
		for _, name := range []string{"report.json", "index.html", "summary.md"} {
			if !strings.Contains(out[name], warning) && !strings.Contains(out[name], strings.ReplaceAll(warning, `"`, "&#34;")) && !strings.Contains(out[name], strings.ReplaceAll(warning, `"`, `\"`)) {
				t.Errorf("%s does not carry the warning %q", name, warning)
			}
		}
	}
}
