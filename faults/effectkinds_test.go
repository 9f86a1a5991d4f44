package faults_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/runtwice/twice/faults"
)

// The outage and the slow answer are schedule words that read back as
// they print, and act on an effect call's step.
func TestOutageAndSlowParse(t *testing.T) {
	for text, want := range map[string]faults.Kind{
		"j1a1w1!outage:2 > +30s j1a2w2": faults.KindEffectOutage,
		"j1a1w1!slow:3":                 faults.KindEffectSlow,
	} {
		s, err := faults.Parse(text)
		if err != nil {
			t.Fatalf("Parse(%q): %v", text, err)
		}
		if got := s.Deliveries[0].Fault; got != want || !got.OnEffect() {
			t.Errorf("Parse(%q) fault = %v (on effect %v), want %v on an effect call", text, got, got.OnEffect(), want)
		}
		if s.String() != text {
			t.Errorf("Parse(%q).String() = %q", text, s.String())
		}
	}
	for _, text := range []string{"j1a1w1!outage", "j1a1w1!slow"} {
		if _, err := faults.Parse(text); err == nil {
			t.Errorf("Parse(%q) succeeded; an effect fault needs its step", text)
		}
	}
}

// The default matrix loses the answer of an HTTP call with a key as an
// outage, its client's retries with the key included; any other effect
// call, an HTTP call without a key too, loses one answer.
func TestLostRepliesOutageOnKeyedHTTPCalls(t *testing.T) {
	plan := faults.Plan{Steps: []faults.Step{
		{SQL: "SELECT 1"},
		{SQL: "POST api.stripe.com/v1/transfers", Effect: "api.stripe.com", Key: "k1", HTTP: true},
		{SQL: "POST hooks.example.com/a", Effect: "hooks.example.com", HTTP: true},
		{SQL: "payment key=order-1", Effect: "payment", Key: "order-1"},
	}}
	var got []string
	for _, s := range faults.EffectLostReplies().Schedules(plan) {
		got = append(got, s.String())
	}
	want := []string{"j1a1w1!outage:2", "j1a1w1!lostreply:3", "j1a1w1!lostreply:4"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("EffectLostReplies mismatch (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		f    faults.Fault
		want string
	}{{faults.EffectSlowAt(2), "j1a1w1!slow:2"}, {faults.EffectOutageAt(3), "j1a1w1!outage:3"}} {
		s := tt.f.Schedules(plan)
		if len(s) != 1 || s[0].String() != tt.want {
			t.Errorf("%s: schedules %v, want %s", tt.f.Name(), s, tt.want)
		}
	}
	for _, f := range []faults.Fault{faults.EffectSlowAt(0), faults.EffectOutageAt(0)} {
		if f.Validate() == nil {
			t.Errorf("%s at step 0 is valid", f.Name())
		}
	}
}

// The default matrix answers slowly only a keyless HTTP call whose client
// waited with a deadline: there the client's own timeout is an answer it
// can get and may retry. A keyed call, a call with no deadline and a call
// that is not HTTP get none.
func TestSlowAnswersOnKeylessCallsWithADeadline(t *testing.T) {
	plan := faults.Plan{Steps: []faults.Step{
		{SQL: "SELECT 1"},
		{SQL: "POST api.stripe.com/v1/transfers", Effect: "api.stripe.com", Key: "k1", HTTP: true, Deadline: true},
		{SQL: "POST hooks.example.com/a", Effect: "hooks.example.com", HTTP: true, Deadline: true},
		{SQL: "POST hooks.example.com/b", Effect: "hooks.example.com", HTTP: true},
		{SQL: "email to a@example.com", Effect: "email"},
		{SQL: "GET hooks.example.com/c", Effect: "hooks.example.com", HTTP: true, Deadline: true},
	}}
	var got []string
	for _, s := range faults.EffectSlowAnswers().Schedules(plan) {
		got = append(got, s.String())
	}
	if diff := cmp.Diff([]string{"j1a1w1!slow:3", "j1a1w1!slow:6"}, got); diff != "" {
		t.Errorf("EffectSlowAnswers mismatch (-want +got):\n%s", diff)
	}
	var inDefault bool
	for _, f := range faults.Default() {
		inDefault = inDefault || f.Name() == faults.NameEffectSlow
	}
	if !inDefault {
		t.Errorf("the default matrix has no %s", faults.NameEffectSlow)
	}
	if got := faults.EffectSlowAnswers().Schedules(faults.Plan{Steps: plan.Steps[:2]}); len(got) != 0 {
		t.Errorf("a job with only keyed calls gets slow answers: %v", got)
	}
}
