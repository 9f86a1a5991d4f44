package faults_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/runtwice/twice/faults"
)

func steps(sqls ...string) []faults.Step {
	var out []faults.Step
	for _, s := range sqls {
		if s == "email" {
			out = append(out, faults.Step{SQL: "email to=a@b", Effect: "email"})
			continue
		}
		out = append(out, faults.Step{SQL: s, Local: local(s)})
	}
	return out
}

// local is what the proxy reads as local, for the statements these tests
// use (the proxy's own tests cover the rest).
func local(sql string) bool {
	if strings.HasPrefix(sql, "SET CONSTRAINTS") {
		return false
	}
	for _, p := range []string{"BEGIN", "START TRANSACTION", "SAVEPOINT", "RELEASE", "SET "} {
		if strings.HasPrefix(sql, p) {
			return true
		}
	}
	return false
}

func TestFree(t *testing.T) {
	got := faults.Free(steps("BEGIN", "SET LOCAL lock_timeout = '1s'", "SELECT 1", "SAVEPOINT a", "RELEASE a", "email", "COMMIT"))
	// The savepoint follows a SELECT that may wait on a lock, so it is not
	// free even though it is local; the RELEASE after it is.
	want := []bool{true, true, false, false, true, false, false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Free mismatch (-want +got):\n%s", diff)
	}
	if got := faults.Free([]faults.Step{{SQL: "BEGIN", Effect: "email", Local: true}}); got[0] {
		t.Error("an effect call marked Local is free; want no effect call free")
	}
}

func TestReducedInterleavingsCounts(t *testing.T) {
	tests := []struct {
		name  string
		steps []faults.Step
		max   int
		want  int
	}{
		{"nothing free: every order", steps("SELECT 1", "INSERT INTO t VALUES (1)", "COMMIT"), 24, 20},
		{"a transaction: the BEGINs commute", steps("BEGIN", "INSERT INTO t VALUES (1)", "COMMIT"), 24, 6},
		// 252 orders, sampled down to 24 before; 20 classes, all tried now.
		{"begin and set local", steps("BEGIN", "SET LOCAL lock_timeout = '1s'", "SELECT 1", "INSERT INTO t VALUES (1)", "COMMIT"), 24, 20},
		{"a savepoint after a read is not free", steps("SELECT 1", "SAVEPOINT a", "COMMIT"), 24, 20},
		{"only free steps: one order", steps("BEGIN", "SET x = 1"), 24, 1},
		{"effects are never free", steps("email", "email"), 24, 6},
		{"more classes than the cap: a sample of them", steps("BEGIN", "SELECT 1", "UPDATE t SET a = 1", "INSERT INTO t VALUES (1)", "COMMIT"), 24, 24},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := faults.ReducedInterleavings(tt.steps, tt.max)
			if len(got) != tt.want {
				t.Errorf("%d orders, want %d: %v", len(got), tt.want, got)
			}
		})
	}
}

// dependentPairs is what decides an order's class: for every pair of
// steps of the two deliveries that do not commute, which one runs first.
func dependentPairs(free []bool, o []int) string {
	pos1, pos2 := map[int]int{}, map[int]int{}
	for t, v := range o {
		if v == 1 {
			pos1[len(pos1)+1] = t
		} else {
			pos2[len(pos2)+1] = t
		}
	}
	var b []byte
	for i := 1; i <= len(free); i++ {
		for j := 1; j <= len(free); j++ {
			if free[i-1] || free[j-1] {
				continue
			}
			if pos1[i] < pos2[j] {
				b = append(b, '<')
			} else {
				b = append(b, '>')
			}
		}
	}
	return string(b)
}

// Every order of the full set has its class represented exactly once
// among the kept orders, by an order equivalent to it; and the normal
// form of any order is the kept order of its class. Checked for every
// pattern of free and not free steps of up to four steps.
func TestReducedInterleavingsCoverEveryClass(t *testing.T) {
	for n := 1; n <= 4; n++ {
		for mask := range 1 << n {
			var ss []faults.Step
			for k := range n {
				if mask&(1<<k) != 0 {
					ss = append(ss, faults.Step{SQL: "SET LOCAL x = 1", Local: true})
				} else {
					ss = append(ss, faults.Step{SQL: "UPDATE t SET a = a + 1"})
				}
			}
			free := faults.Free(ss)
			t.Run(fmt.Sprintf("n=%d free=%v", n, free), func(t *testing.T) {
				kept := faults.ReducedInterleavings(ss, 1000)
				keptClass := map[string][]int{}
				for _, o := range kept {
					c := dependentPairs(free, o)
					if other, ok := keptClass[c]; ok {
						t.Errorf("kept orders %v and %v are equivalent; want one per class", other, o)
					}
					keptClass[c] = o
				}
				for _, o := range faults.Interleavings(n, n, 1000) {
					c := dependentPairs(free, o)
					k, ok := keptClass[c]
					if !ok {
						t.Errorf("order %v: no kept order is equivalent to it", o)
						continue
					}
					if nf := faults.NormalForm(ss, o); !slices.Equal(nf, k) {
						t.Errorf("NormalForm(%v) = %v, want the kept order of its class %v", o, nf, k)
					}
				}
			})
		}
	}
}

// Beyond the cap the reduced sample holds the normal form of every order
// the unreduced sample tries, so it never covers less.
func TestReducedSampleCoversTheUnreducedOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		n := 4 + rng.IntN(4)
		var ss []faults.Step
		for k := range n {
			if k == 0 || rng.IntN(3) == 0 {
				ss = append(ss, faults.Step{SQL: "BEGIN", Local: true})
			} else {
				ss = append(ss, faults.Step{SQL: "INSERT INTO t VALUES (1)"})
			}
		}
		const max = 24
		kept := faults.ReducedInterleavings(ss, max)
		if len(kept) > max {
			t.Errorf("%d steps: %d orders, more than the cap %d", n, len(kept), max)
		}
		for _, o := range faults.Interleavings(n, n, max) {
			nf := faults.NormalForm(ss, o)
			if !slices.ContainsFunc(kept, func(k []int) bool { return slices.Equal(k, nf) }) {
				t.Errorf("free %v: the unreduced sample's %v has normal form %v, which the reduced sample lacks", faults.Free(ss), o, nf)
			}
		}
		if diff := cmp.Diff(kept, faults.ReducedInterleavings(ss, max)); diff != "" {
			t.Errorf("the reduced sample is not deterministic:\n%s", diff)
		}
	}
}

// Unreduced expands a concurrent fault as before the reduction.
func TestUnreducedPlan(t *testing.T) {
	plan := faults.Plan{Steps: steps("BEGIN", "INSERT INTO t VALUES (1)", "COMMIT")}
	if n := len(faults.ConcurrentDelivery().Schedules(plan)); n != 6 {
		t.Errorf("reduced: %d schedules, want 6", n)
	}
	plan.Unreduced = true
	if n := len(faults.ConcurrentDelivery().Schedules(plan)); n != 20 {
		t.Errorf("unreduced: %d schedules, want 20", n)
	}
}

// Expand splits a concurrent fault's schedules once: what runs, what the
// queue's one delivery at a time would refuse, and what the reduction
// prunes: what the fault without either runs beyond the rest.
func TestExpandSplitsOnce(t *testing.T) {
	clean := steps("BEGIN", "SELECT 1", "COMMIT")
	clean[2].CommitPoint = true
	clean = append(clean, faults.Step{SQL: "INSERT INTO t VALUES (1)", CommitPoint: true, Autocommit: true})
	texts := func(ss []faults.Schedule) []string {
		var out []string
		for _, s := range ss {
			if s.Fault != faults.NameConcurrentDelivery {
				t.Errorf("%s: Fault = %q, want %q", s, s.Fault, faults.NameConcurrentDelivery)
			}
			out = append(out, s.String())
		}
		return out
	}
	plan := faults.Plan{Steps: clean, OneDeliveryAtATime: true}
	e := faults.ConcurrentDelivery().Expand(plan)
	if e.Fault != faults.NameConcurrentDelivery {
		t.Errorf("Fault = %q", e.Fault)
	}
	if diff := cmp.Diff(texts(faults.ConcurrentDelivery().Schedules(plan)), texts(e.Run)); diff != "" {
		t.Errorf("Run is not Schedules (-Schedules +Run):\n%s", diff)
	}
	if len(e.Run) != 1 || len(e.Refused) == 0 || len(e.Pruned) == 0 {
		t.Fatalf("Run %d, Refused %d, Pruned %d schedules; want 1 and some of each", len(e.Run), len(e.Refused), len(e.Pruned))
	}
	whole := plan
	whole.OneDeliveryAtATime = false
	if diff := cmp.Diff(texts(faults.ConcurrentDelivery().Schedules(whole)), texts(append(e.Run, e.Refused...))); diff != "" {
		t.Errorf("Run+Refused is not the fault handed out whole (-whole +Run+Refused):\n%s", diff)
	}
	unreduced := whole
	unreduced.Unreduced = true
	// Pruned is what the unreduced fault (a sample of it here: 70 orders
	// are more than 24) runs beyond the rest.
	ran := texts(append(e.Run, e.Refused...))
	var want []string
	for _, s := range texts(faults.ConcurrentDelivery().Schedules(unreduced)) {
		if !slices.Contains(ran, s) {
			want = append(want, s)
		}
	}
	if diff := cmp.Diff(want, texts(e.Pruned)); diff != "" {
		t.Errorf("Pruned is not the unreduced fault's other orders (-want +Pruned):\n%s", diff)
	}
	if p := faults.ConcurrentDelivery().Expand(unreduced).Pruned; len(p) != 0 {
		t.Errorf("Unreduced prunes %v, want nothing", texts(p))
	}
	// The crash points before BEGIN, SELECT and COMMIT are one class;
	// the one before the autocommit INSERT, after the COMMIT, another.
	if e := faults.CrashAtEveryStep().Expand(plan); len(e.Run) != 2 || len(e.Refused) != 0 || len(e.Pruned) != 2 {
		t.Errorf("crash-mid-job: Run %d, Refused %d, Pruned %d; want 2, 0 and 2", len(e.Run), len(e.Refused), len(e.Pruned))
	}
	if e := faults.CrashAtEveryStep().Expand(unreduced); len(e.Run) != 4 || len(e.Refused)+len(e.Pruned) != 0 {
		t.Errorf("crash-mid-job, Unreduced: Run %d, Refused %d, Pruned %d; want 4 and none left out", len(e.Run), len(e.Refused), len(e.Pruned))
	}
}
