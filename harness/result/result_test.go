package result_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/runtwice/twice/harness/result"
)

// A check's record keeps the key "Status" for its Outcome: the twice
// runner, and any tool that reads records, look for it there.
func TestOutcomeKeepsItsJSONKey(t *testing.T) {
	b, err := json.Marshal(result.Result{Job: "reward", Outcome: result.OutcomeExpectedFinding})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"Job":"reward","Status":"expected-finding",`; !strings.HasPrefix(string(b), want) {
		t.Errorf("json.Marshal(Result) = %s, want it to start %s", b, want)
	}
	var back result.Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Outcome != result.OutcomeExpectedFinding {
		t.Errorf("Outcome read back = %q, want %q", back.Outcome, result.OutcomeExpectedFinding)
	}
}
