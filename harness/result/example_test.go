package result_test

import (
	"fmt"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/result"
)

// A delivery that crashed before its third step: Steps holds every step
// it was granted, the third with the fate the executor recorded, and
// Delivery.At names it.
func ExampleDeliveryOutcome_Faulted() {
	o := result.DeliveryOutcome{
		Delivery: faults.Scheduled{Job: 1, Attempt: 1, Worker: 1, Fault: faults.KindCrash, At: 3},
		Steps: []result.StepTaken{
			{Step: faults.Step{SQL: "begin"}, Fate: result.Ran},
			{Step: faults.Step{SQL: "UPDATE accounts SET points = points + 50"}, Fate: result.Ran},
			{Step: faults.Step{SQL: "commit", CommitPoint: true}, Fate: result.CrashedBefore},
		},
		Died: true,
	}
	hit := o.Faulted()
	fmt.Println(hit.SQL, hit.Fate, o.Steps[o.Delivery.At-1] == *hit)
	fmt.Println(len(o.Completed()), "steps completed")
	// Output:
	// commit crashed-before true
	// 2 steps completed
}
