package faults_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
)

// A consumer that checks its inbox, sends an email and records it: the
// email is step 3.
var inboxThenEmail = []faults.Step{
	{SQL: "BEGIN", Local: true},
	{SQL: "SELECT 1 FROM inbox WHERE id = $1"},
	{SQL: "email to=asha@example.com subject=Welcome", Effect: "email"},
	{SQL: "INSERT INTO inbox VALUES ($1)"},
	{SQL: "COMMIT", CommitPoint: true},
}

func pausesOf(t *testing.T, p faults.Plan) []int {
	t.Helper()
	var at []int
	for _, s := range faults.VisibilityTimeout().Schedules(p) {
		require.Len(t, s.Deliveries, 2)
		at = append(at, s.Deliveries[1].After)
	}
	return at
}

// With the steps' times declared, the first delivery is paused only at
// the step it is in when the queue gives up: an SMTP call of 2s under a
// 1s BackOff overlaps at the email, before and after it is made; one of
// 20ms has returned by then, and the fault has no schedule.
func TestVisibilityTimeoutRespectsStepTimes(t *testing.T) {
	p := faults.Plan{Steps: inboxThenEmail, VisibilityTimeout: time.Second}
	assert.Equal(t, []int{1, 2, 3, 4, 5}, pausesOf(t, p), "timing unknown: every step")

	p.StepTimes = []faults.StepTime{{Effect: "email", Takes: 2 * time.Second}}
	assert.Equal(t, []int{2, 3}, pausesOf(t, p))
	assert.Equal(t, &faults.Overlap{Timeout: time.Second, Took: 2 * time.Second, In: 3}, p.Overlap())

	p.StepTimes = []faults.StepTime{{Effect: "email", Takes: 20 * time.Millisecond}}
	assert.Empty(t, pausesOf(t, p))
	assert.Equal(t, &faults.Overlap{Timeout: time.Second, Took: 20 * time.Millisecond}, p.Overlap())

	// Statements add up: 600ms before the email, which then starts at
	// 600ms and is in flight at 1s. The first match wins.
	p.StepTimes = []faults.StepTime{
		{Match: `^SELECT`, Takes: 600 * time.Millisecond},
		{Effect: "email", Match: `subject=Welcome`, Takes: time.Second},
		{Effect: "email", Takes: time.Hour},
	}
	assert.Equal(t, []int{2, 3}, pausesOf(t, p))
	assert.Equal(t, 600*time.Millisecond, p.Overlap().Started)
	assert.Equal(t, 1600*time.Millisecond, p.Overlap().Took)

	// A first step slower than the timeout pauses after it only.
	p.StepTimes = []faults.StepTime{{Match: `^BEGIN`, Takes: time.Minute}}
	assert.Equal(t, []int{1}, pausesOf(t, p))

	// The default timeout applies when the plan has none.
	p = faults.Plan{Steps: inboxThenEmail, StepTimes: []faults.StepTime{{Effect: "email", Takes: 20 * time.Second}}}
	assert.Empty(t, pausesOf(t, p), "20s is under the default 30s")
}

func TestStepTimeValidate(t *testing.T) {
	require.NoError(t, faults.StepTime{Effect: "email", Takes: time.Second}.Validate())
	for _, c := range []struct {
		t    faults.StepTime
		want string
	}{
		{faults.StepTime{Takes: time.Second}, "neither Effect nor Match"},
		{faults.StepTime{Match: `api\.stripe\.com(`, Takes: time.Second}, "missing closing )"},
		{faults.StepTime{Effect: "email"}, "Takes is 0s; want a positive duration"},
		{faults.StepTime{Effect: "email", Takes: -time.Second}, "Takes is -1s"},
	} {
		err := c.t.Validate()
		require.Error(t, err, "%+v", c.t)
		assert.ErrorContains(t, err, c.want)
		assert.ErrorContains(t, err, "faults.StepTime{")
	}
}
