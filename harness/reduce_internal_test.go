package harness

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/wireproxy"
)

func TestDiverged(t *testing.T) {
	st := func(sqls ...string) []faults.Step {
		var out []faults.Step
		for _, s := range sqls {
			out = append(out, faults.Step{SQL: s, Local: wireproxy.Local(s)})
		}
		return out
	}
	clean := st("BEGIN", "SET LOCAL x = 1", "INSERT INTO t VALUES (1)", "COMMIT")
	free := faults.Free(clean) // steps 1 and 2
	sched := faults.Schedule{Order: []int{1, 2}}
	tests := []struct {
		name  string
		asked [2][]faults.Step
		want  *result.Divergence
	}{
		{"both as the clean run", [2][]faults.Step{clean, clean}, nil},
		{"other local steps are as good", [2][]faults.Step{clean, st("START TRANSACTION", "SAVEPOINT a", "SELECT 1")}, nil},
		{"a read where the clean run set", [2][]faults.Step{clean, st("BEGIN", "SELECT 1", "COMMIT")},
			&result.Divergence{Schedule: sched, Delivery: 2, At: 2, Took: &faults.Step{SQL: "SELECT 1"}}},
		{"the first delivery is checked too", [2][]faults.Step{st("SELECT 1"), clean},
			&result.Divergence{Schedule: sched, Delivery: 1, At: 1, Took: &faults.Step{SQL: "SELECT 1"}}},
		{"no step where the reduction moved one", [2][]faults.Step{clean, nil},
			&result.Divergence{Schedule: sched, Delivery: 2, At: 1}},
		{"an end right after the first", [2][]faults.Step{clean, st("BEGIN")},
			&result.Divergence{Schedule: sched, Delivery: 2, At: 1, Took: &faults.Step{SQL: "BEGIN", Local: true}}},
		{"an end right after a moved step", [2][]faults.Step{clean, st("BEGIN", "SET x = 2")},
			&result.Divergence{Schedule: sched, Delivery: 2, At: 2, Took: &faults.Step{SQL: "SET x = 2", Local: true}}},
		{"an effect call is never local", [2][]faults.Step{clean, {{SQL: "BEGIN", Local: true}, {SQL: "email to=a", Effect: "email"}, {SQL: "COMMIT"}}},
			&result.Divergence{Schedule: sched, Delivery: 2, At: 2, Took: &faults.Step{SQL: "email to=a", Effect: "email"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, diverged(sched, free, tt.asked)); diff != "" {
				t.Errorf("diverged mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
