package record

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/runtwice/twice/faults"
)

// Deal gives the costliest schedules first, each to the least loaded
// shard, on top of the loads earlier checks left; equal costs keep their
// order, so every shard computes the same deal.
func TestDealLongestFirst(t *testing.T) {
	owner, loads := Deal([]float64{1, 5, 3, 3, 1, 1}, []float64{0, 0, 2})
	// 5 → shard 0 (0,0,2 → 5,0,2); 3 → 1 (5,3,2); 3 → 2 (5,3,5);
	// 1 → 1 (5,4,5); 1 → 1 (5,5,5); 1 → 0 (6,5,5).
	if want := []int{1, 0, 1, 2, 1, 0}; !slices.Equal(owner, want) {
		t.Errorf("owner = %v, want %v", owner, want)
	}
	if want := []float64{6, 5, 5}; !slices.Equal(loads, want) {
		t.Errorf("loads = %v, want %v", loads, want)
	}
	again, _ := Deal([]float64{1, 5, 3, 3, 1, 1}, []float64{0, 0, 2})
	if !slices.Equal(owner, again) {
		t.Errorf("the same inputs dealt %v, then %v", owner, again)
	}
}

// Dealt in turn, one costly fault's schedules land on the same shard
// when their count is a multiple of the shards'; by cost they spread.
func TestDealEvensWhatTurnsDoNot(t *testing.T) {
	costs := []float64{9, 1, 1, 9, 1, 1, 9, 1, 1}
	inTurn := make([]float64, 3)
	for i, c := range costs {
		inTurn[i%3] += c
	}
	_, byCost := Deal(costs, make([]float64, 3))
	if slices.Max(inTurn)/slices.Min(inTurn) < 5 {
		t.Fatalf("in turn: %v; the example should be uneven", inTurn)
	}
	if got := slices.Max(byCost) / slices.Min(byCost); got > 1.01 {
		t.Errorf("by cost: loads %v, %.2fx apart; want even", byCost, got)
	}
}

// A fault the timings never ran costs the mean of those they did.
func TestScheduleCostsOfAnUnknownFault(t *testing.T) {
	c := PlanCheck{Costs: map[faults.Name]float64{faults.NameRunTwice: 10, faults.NameCrashBeforeAck: 20}}
	got := c.ScheduleCosts([]faults.Name{faults.NameRunTwice, faults.NameConcurrentDelivery})
	if want := []float64{10, 15}; !slices.Equal(got, want) {
		t.Errorf("costs = %v, want %v", got, want)
	}
}

// The plan is found by the test, the job and the working directory.
func TestPlanCheckByDirectory(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	p := Plan{Checks: []PlanCheck{
		{Dir: filepath.Join(wd, "elsewhere"), Test: "TestA", Job: "a"},
		{Dir: wd, Test: "TestA", Job: "a", Loads: []float64{1}},
	}}
	if c := p.Check("TestA", "a"); c == nil || len(c.Loads) != 1 {
		t.Errorf("Check(TestA, a) = %+v, want the entry of this directory", c)
	}
	if c := p.Check("TestA", "b"); c != nil {
		t.Errorf("Check(TestA, b) = %+v, want none", c)
	}
	path := filepath.Join(t.TempDir(), "plan.json")
	if err := WritePlan(path, &p); err != nil {
		t.Fatal(err)
	}
	t.Setenv(PlanEnv, path)
	back, err := ReadPlan()
	if err != nil || back == nil || len(back.Checks) != 2 {
		t.Fatalf("ReadPlan = %+v, %v", back, err)
	}
	t.Setenv(PlanEnv, filepath.Join(t.TempDir(), "none.json"))
	if _, err := ReadPlan(); err == nil {
		t.Error("ReadPlan of a missing file: no error")
	}
}
