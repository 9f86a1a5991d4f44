package render_test

import (
	"strings"
	"testing"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/render"
)

func scenario(t *testing.T, fault faults.Name, sched string, diff string) result.Scenario {
	t.Helper()
	s, err := faults.Parse(sched)
	if err != nil {
		t.Fatal(err)
	}
	return result.Scenario{
		Fault: fault, Schedule: s, Verdict: result.NotIdempotent,
		Problems:  []result.Problem{{Kind: result.StateDiffers, Table: "t"}},
		StateDiff: []assert.TableDiff{{Label: string(fault), Table: "t", Diff: diff}},
	}
}

// Scenarios whose diffs differ only in the fault their header names are
// one difference, printed once with the schedules that gave it, one line
// per fault.
func TestFindingGroupsSameDifference(t *testing.T) {
	double := "  - n: 1\n  + n: 2\n"
	res := &result.Result{Job: "hit", Scenarios: []result.Scenario{
		scenario(t, faults.NameRunTwice, "j1a1w1 > j1a2w2", double),
		scenario(t, faults.NameConcurrentDelivery, "j1a1w1 > j1a2w2@1:0 order 1,2", double),
		scenario(t, faults.NameConcurrentDelivery, "j1a1w1 > j1a2w2@1:0 order 2,1", double),
		scenario(t, faults.NameConcurrentDelivery, "j1a1w1 > j1a2w2@1:0 order 2,2", double),
		scenario(t, faults.NameConcurrentDelivery, "j1a1w1 > j1a2w2@1:0 order 1,1", double),
		scenario(t, faults.NameRedrive, "j1a1w1!crash > +72h j1a2w2", "  - n: 1\n  + n: 3\n"),
	}}
	if g := render.Groups(res.Scenarios); len(g) != 2 || len(g[0]) != 5 || len(g[1]) != 1 {
		t.Fatalf("groups = %v, want [[0 1 2 3 4] [5]]", g)
	}
	msg := render.Finding(res, "go test -run '^TestHit$' .")
	for _, want := range []string{
		"not idempotent: job \"hit\": 6 of 6 scenarios differ from one clean run\n",
		"the same difference under 4 more schedules:\n  concurrent-delivery, 4 schedules: j1a1w1 > j1a2w2@1:0 order 1,2; j1a1w1 > j1a2w2@1:0 order 2,1; j1a1w1 > j1a2w2@1:0 order 2,2; and 1 more\n",
		"redrive (schedule j1a1w1!crash > +72h j1a2w2):\n",
		"\nrerun: go test -run '^TestHit$' .",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	if n := strings.Count(msg, "mismatch (-once +twice)"); n != 2 {
		t.Errorf("message prints %d diffs, want 2 (one per difference):\n%s", n, msg)
	}
}

func TestStep(t *testing.T) {
	if got := render.Step(faults.Step{SQL: "email to=a@b", Effect: "email"}); got != "effect: email to=a@b" {
		t.Errorf("effect step = %q", got)
	}
	if got := render.Step(faults.Step{SQL: "UPDATE t\n   SET n = 1"}); got != "UPDATE t SET n = 1" {
		t.Errorf("statement step = %q", got)
	}
}

// A pattern's fix is said once per finding: a later group with the same
// pattern names it and points up, so a finding of many groups does not
// repeat the same paragraph.
func TestFixSaidOnce(t *testing.T) {
	inc := func(s result.Scenario) result.Scenario {
		s.Culprits = []result.Culprit{{Delivery: s.Schedule.Deliveries[1], Step: 1, Op: "update", SQL: "UPDATE t SET n = n + 1",
			Table: "t", Row: "1", Pattern: result.IncrementWithoutRecord}}
		return s
	}
	res := &result.Result{Job: "hit", Scenarios: []result.Scenario{
		inc(scenario(t, faults.NameRunTwice, "j1a1w1 > j1a2w2", "  - n: 1\n  + n: 2\n")),
		inc(scenario(t, faults.NameRedrive, "j1a1w1!crash > +72h j1a2w2", "  - n: 1\n  + n: 3\n")),
	}}
	msg := render.Finding(res, "go test -run '^TestHit$' .")
	if n := strings.Count(msg, "Fix: in the same transaction, insert a ledger row"); n != 1 {
		t.Errorf("the fix is said %d times, want once:\n%s", n, msg)
	}
	if !strings.Contains(msg, "updated t row 1 (increment without a record: the fix is above)") {
		t.Errorf("the second group does not name its pattern:\n%s", msg)
	}
}

// A table diff an earlier group of the finding printed is pointed to,
// not printed again, and the effects' count is left to their diff.
func TestSameTableDiffPointedTo(t *testing.T) {
	same := "  - n: 1\n  + n: 2\n"
	a := scenario(t, faults.NameRunTwice, "j1a1w1 > j1a2w2", same)
	b := scenario(t, faults.NameProducerRetry, "j1a1w1 > j2a1w2", same)
	b.Culprits = []result.Culprit{{Delivery: b.Schedule.Deliveries[1], Step: 1, Op: "insert", SQL: "INSERT INTO t VALUES (2)", Table: "t", Pattern: result.KeyPerEnqueue}}
	b.Problems = append(b.Problems, result.Problem{Kind: result.EffectsDiffer, Extra: 1})
	b.EffectDiff = &assert.EffectDiff{Label: "producer-retry", Extra: 1}
	res := &result.Result{Job: "hit", Scenarios: []result.Scenario{a, b}}
	msg := render.Finding(res, "go test -run '^TestHit$' .")
	if n := strings.Count(msg, "- n: 1"); n != 1 {
		t.Errorf("the table diff is printed %d times, want once:\n%s", n, msg)
	}
	if !strings.Contains(msg, "table \"t\" differs as under run-twice (schedule j1a1w1 > j1a2w2) above\n") {
		t.Errorf("the second group does not point to the first's diff:\n%s", msg)
	}
	if strings.Contains(msg, "effects differ from one clean run") {
		t.Errorf("the effects' count is printed beside their diff:\n%s", msg)
	}
}
