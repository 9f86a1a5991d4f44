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

// Visibility-timeout's pause classes start after a statement that may
// hold a lock and end before a commit point; Waited keeps one only for
// the pattern of a second delivery waiting on the first one's locks.
func TestPauseClasses(t *testing.T) {
	clean := steps("BEGIN", "INSERT a", "INSERT b", "INSERT c", "COMMIT")
	clean[4].CommitPoint = true
	e := faults.VisibilityTimeout().Expand(faults.Plan{Steps: clean})
	if len(e.Pauses) != 1 || e.Pauses[0].From != 2 || e.Pauses[0].To != 4 {
		t.Fatalf("pauses %+v, want one class 2..4", e.Pauses)
	}
	var after []int
	for _, s := range e.Run {
		after = append(after, s.Deliveries[1].After)
	}
	if diff := cmp.Diff([]int{1, 2, 5}, after); diff != "" {
		t.Errorf("pause points run (-want +got):\n%s", diff)
	}
	if len(e.Pruned) != 2 {
		t.Errorf("%d left out, want 2", len(e.Pruned))
	}
	c := e.Pauses[0]
	d2 := steps("BEGIN", "INSERT a", "INSERT b", "INSERT c", "COMMIT")
	asked := [2][]faults.Step{clean, d2}
	// d1 did BEGIN, INSERT a; d2 BEGIN, then INSERT a waited; d1 went
	// on to its COMMIT, then d2 finished.
	waited := []int{1, 1, 2, 2, 1, 1, 1, 2, 2, 2}
	if !c.Waited(clean, asked, waited, 1) {
		t.Error("the wait pattern was not recognised")
	}
	if c.Waited(clean, asked, waited, 2) {
		t.Error("two lock waits kept the class")
	}
	if c.Waited(clean, asked, []int{1, 1, 2, 2, 2, 2, 2, 1, 1, 1}, 1) {
		t.Error("a second delivery that ran through kept the class")
	}
	released := steps("BEGIN", "INSERT a", "ROLLBACK TO SAVEPOINT s", "INSERT c", "COMMIT")
	if c.Waited(clean, [2][]faults.Step{released, d2}, waited, 1) {
		t.Error("a first delivery that released its locks inside the class kept it")
	}
	if e := faults.VisibilityTimeout().Expand(faults.Plan{Steps: clean, Unreduced: true}); len(e.Run) != 5 || len(e.Pauses)+len(e.Pruned) != 0 {
		t.Errorf("Unreduced: %d run, %d classes, %d left out; want 5, 0, 0", len(e.Run), len(e.Pauses), len(e.Pruned))
	}
}

// A queue that runs statements of its own between deliveries (an
// adapter's fetch) gets every pause point: its fetch may wait on a lock
// the first delivery takes later in what would be the class.
func TestNoPauseClassesWhenTheQueueRunsStatements(t *testing.T) {
	clean := steps("BEGIN", "INSERT a", "INSERT b", "INSERT c", "COMMIT")
	clean[4].CommitPoint = true
	e := faults.VisibilityTimeout().Expand(faults.Plan{Steps: clean, QueueStatements: true})
	if len(e.Pauses) != 0 || len(e.Pruned) != 0 || len(e.Run) != 5 {
		t.Errorf("pauses %+v, %d left out, %d run; want no class, every one of the 5 pause points run", e.Pauses, len(e.Pruned), len(e.Run))
	}
}
