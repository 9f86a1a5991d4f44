package faults_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/runtwice/twice/faults"
)

func crashPoints(ss []faults.Schedule) []int {
	var out []int
	for _, s := range ss {
		out = append(out, s.Deliveries[0].At)
	}
	return out
}

// The crash points inside one transaction run once; a commit point and an
// effect call between statements each end a class, since a crash after
// either leaves it done and one before does not.
func TestCrashClassesSplitAtCommitsAndEffects(t *testing.T) {
	clean := steps("BEGIN", "INSERT a", "INSERT b", "email", "INSERT c", "COMMIT", "SELECT 1", "BEGIN", "UPDATE d", "COMMIT")
	clean[5].CommitPoint = true
	clean[9].CommitPoint = true
	e := faults.CrashAtEveryStep().Expand(faults.Plan{Steps: clean})

	// Classes: 1..4 (BEGIN, two INSERTs before the email), 5..6 (after
	// the email, before COMMIT), 7..10 (after the COMMIT: SELECT, BEGIN,
	// UPDATE, up to the second COMMIT).
	var got [][2]int
	for _, c := range e.Classes {
		got = append(got, [2]int{c.From, c.To})
		if c.Run.Deliveries[0].At != c.To || c.Run.Fault != faults.NameCrashMidJob {
			t.Errorf("class %d..%d runs %s (fault %q), want its last crash point", c.From, c.To, c.Run, c.Run.Fault)
		}
	}
	if diff := cmp.Diff([][2]int{{1, 4}, {5, 6}, {7, 10}}, got); diff != "" {
		t.Errorf("classes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{4, 6, 10}, crashPoints(e.Run)); diff != "" {
		t.Errorf("crash points run (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{1, 2, 3, 5, 7, 8, 9}, crashPoints(e.Pruned)); diff != "" {
		t.Errorf("crash points left out (-want +got):\n%s", diff)
	}

	// Redrive has the same classes, and its crash after the last step.
	r := faults.Redrive(faults.DefaultRedriveAfter).Expand(faults.Plan{Steps: clean})
	if diff := cmp.Diff([]int{4, 6, 10, 0}, crashPoints(r.Run)); diff != "" {
		t.Errorf("redrive crash points run (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(crashPoints(e.Pruned), crashPoints(r.Pruned)); diff != "" {
		t.Errorf("redrive crash points left out (-crash-mid-job +redrive):\n%s", diff)
	}

	// An autocommit write is a commit point of its own: every crash point
	// around it is a class of its own.
	auto := []faults.Step{{SQL: "INSERT x", CommitPoint: true, Autocommit: true}, {SQL: "INSERT y", CommitPoint: true, Autocommit: true}}
	if e := faults.CrashAtEveryStep().Expand(faults.Plan{Steps: auto}); len(e.Classes)+len(e.Pruned) != 0 || len(e.Run) != 2 {
		t.Errorf("autocommit writes: %d run, %d classes, %d left out; want 2, 0, 0", len(e.Run), len(e.Classes), len(e.Pruned))
	}
}

// Differs finds the first step of a class the representative did not take
// as the clean run did: another text, an effect call, a commit point, or
// no crash at all.
func TestCrashClassDiffers(t *testing.T) {
	clean := steps("BEGIN", "INSERT a", "INSERT b", "COMMIT")
	clean[3].CommitPoint = true
	c := faults.CrashAtEveryStep().Expand(faults.Plan{Steps: clean}).Classes[0]
	if c.From != 1 || c.To != 4 {
		t.Fatalf("class %d..%d, want 1..4", c.From, c.To)
	}
	other := steps("BEGIN", "INSERT a", "INSERT z", "COMMIT")
	withEffect := steps("BEGIN", "email", "INSERT b", "COMMIT")
	committed := steps("BEGIN", "INSERT a", "INSERT b", "COMMIT")
	committed[1].CommitPoint = true
	// The step at the crash point itself may be anything: it never ran.
	crashedOnOther := steps("BEGIN", "INSERT a", "INSERT b", "ROLLBACK")
	for _, tt := range []struct {
		name string
		took []faults.Step
		want int
	}{
		{"as the clean run", clean, 0},
		{"another statement", other, 3},
		{"an effect call", withEffect, 2},
		{"a commit point", committed, 2},
		{"ended before the crash point", clean[:3], 4},
		{"another step at the crash point", crashedOnOther, 0},
	} {
		if got := c.Differs(clean, tt.took); got != tt.want {
			t.Errorf("%s: Differs = %d, want %d", tt.name, got, tt.want)
		}
	}
}
