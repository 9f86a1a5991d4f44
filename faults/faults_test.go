package faults_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runtwice/twice/faults"
)

func TestScheduleTextRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		text string
		want faults.Schedule
	}{
		{"run twice", "j1a1w1 > j1a2w2", faults.Schedule{Deliveries: []faults.Scheduled{
			{Job: 1, Attempt: 1, Worker: 1}, {Job: 1, Attempt: 2, Worker: 2}}}},
		{"crash mid-job", "j1a1w1!crash:3 > +30s j1a2w2", faults.Schedule{Deliveries: []faults.Scheduled{
			{Job: 1, Attempt: 1, Worker: 1, Fault: faults.KindCrash, At: 3},
			{Job: 1, Attempt: 2, Worker: 2, Advance: 30 * time.Second}}}},
		{"crash before ack", "j1a1w1!crash > +30s j1a2w2", faults.Schedule{Deliveries: []faults.Scheduled{
			{Job: 1, Attempt: 1, Worker: 1, Fault: faults.KindCrash},
			{Job: 1, Attempt: 2, Worker: 2, Advance: 30 * time.Second}}}},
		{"ambiguous", "j1a1w1!ambiguous:4 > +1m j1a2w2", faults.Schedule{Deliveries: []faults.Scheduled{
			{Job: 1, Attempt: 1, Worker: 1, Fault: faults.KindAmbiguous, At: 4},
			{Job: 1, Attempt: 2, Worker: 2, Advance: time.Minute}}}},
		{"lost ack, same worker", "j1a1w1!lostack > +30s j1a2w1", faults.Schedule{Deliveries: []faults.Scheduled{
			{Job: 1, Attempt: 1, Worker: 1, Fault: faults.KindLostAck},
			{Job: 1, Attempt: 2, Worker: 1, Advance: 30 * time.Second}}}},
		{"concurrent", "j1a1w1 > j2a1w2@1:0 order 1,2,2,1", faults.Schedule{
			Deliveries: []faults.Scheduled{{Job: 1, Attempt: 1, Worker: 1}, {Job: 2, Attempt: 1, Worker: 2, With: 1}},
			Order:      []int{1, 2, 2, 1}}},
		{"redrive", "j1a1w1!crash:2 > +72h j1a2w2", faults.Schedule{Deliveries: []faults.Scheduled{
			{Job: 1, Attempt: 1, Worker: 1, Fault: faults.KindCrash, At: 2},
			{Job: 1, Attempt: 2, Worker: 2, Advance: 72 * time.Hour}}}},
		{"odd duration", "+1.5s j1a1w1", faults.Schedule{Deliveries: []faults.Scheduled{
			{Job: 1, Attempt: 1, Worker: 1, Advance: 1500 * time.Millisecond}}}},
		{"effect lost reply", "j1a1w1!lostreply:2", faults.Schedule{Deliveries: []faults.Scheduled{
			{Job: 1, Attempt: 1, Worker: 1, Fault: faults.KindEffectLostReply, At: 2}}}},
		{"crash right after an effect", "j1a1w1!crashafter:2 > +30s j1a2w2", faults.Schedule{Deliveries: []faults.Scheduled{
			{Job: 1, Attempt: 1, Worker: 1, Fault: faults.KindCrashAfterEffect, At: 2},
			{Job: 1, Attempt: 2, Worker: 2, Advance: 30 * time.Second}}}},
		{"effect failed, then a redelivery", "j1a1w1!failed:3 > +30s j1a2w2", faults.Schedule{Deliveries: []faults.Scheduled{
			{Job: 1, Attempt: 1, Worker: 1, Fault: faults.KindEffectFailed, At: 3},
			{Job: 1, Attempt: 2, Worker: 2, Advance: 30 * time.Second}}}},
		{"held commit", "j1a1w1 > j1a2w2@1:0 order 1,2,1~,2", faults.Schedule{
			Deliveries: []faults.Scheduled{{Job: 1, Attempt: 1, Worker: 1}, {Job: 1, Attempt: 2, Worker: 2, With: 1}},
			Order:      []int{1, 2, 1, 2}, Holds: []int{3}}},
		{"late producer copy", "j1a1w1 > late j2a1w2", faults.Schedule{Deliveries: []faults.Scheduled{
			{Job: 1, Attempt: 1, Worker: 1}, {Job: 2, Attempt: 1, Worker: 2, Late: true}}}},
		{"producer copy past a dedup window", "j1a1w1 > +3601s late j2a1w2", faults.Schedule{Deliveries: []faults.Scheduled{
			{Job: 1, Attempt: 1, Worker: 1}, {Job: 2, Attempt: 1, Worker: 2, Late: true, Advance: time.Hour + time.Second}}}},
		{"late copy while the original runs", "j1a1w1 > late j2a1w2@1:1", faults.Schedule{Deliveries: []faults.Scheduled{
			{Job: 1, Attempt: 1, Worker: 1}, {Job: 2, Attempt: 1, Worker: 2, Late: true, With: 1, After: 1}}}},
		{"effect faults beside others", "j1a1w1!lostreply:1 > j2a1w2@1:0!failed:2 order 1,2", faults.Schedule{
			Deliveries: []faults.Scheduled{
				{Job: 1, Attempt: 1, Worker: 1, Fault: faults.KindEffectLostReply, At: 1},
				{Job: 2, Attempt: 1, Worker: 2, With: 1, Fault: faults.KindEffectFailed, At: 2}},
			Order: []int{1, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := faults.Parse(tt.text)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse(%q) mismatch (-want +got):\n%s", tt.text, diff)
			}
			if s := got.String(); s != tt.text {
				t.Errorf("String() = %q, want %q", s, tt.text)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct{ text, want string }{
		{"", "empty"},
		{"j1a1", `want "w" next`},
		{"j0a1w1", `"j" needs a number from 1`},
		{"j1a1w1x", `unexpected "x"`},
		{"j1a1w1!explode", `unknown fault "explode"`},
		{"j1a1w1!ambiguous", "needs its step"},
		{"j1a1w1!lostack:2", "lostack takes no step"},
		{"j1a1w1!lostreply", "needs the step of its effect call"},
		{"j1a1w1!failed", "needs the step of its effect call"},
		{"j1a1w1!failed:0", "failed needs a step from 1"},
		{"j1a1w1!timeout:2", "crashafter:N, outage:N or slow:N"},
		{"j1a1w1!crashafter", "needs the step of its effect call"},
		{"+soon j1a1w1", "not a positive duration"},
		{"j1a1w1 > j1a2w2@3:1", "can only overlap a delivery started before it"},
		{"j1a1w1 > j1a2w2@1", "want @delivery:steps"},
		{"j1a1w1 order 1,3", "order names delivery 3 of 1"},
		{"j1a1w1 order 1,x", `"x" is not a delivery number`},
		{"j1a1w1 order 1~~", `"1~~" is not a delivery number from 1, held or not`},
		{"j1a1w1 order ~", `"~" is not a delivery number`},
		{"j1a1w1!crash:1!crash:1", `a delivery has one fault, and this one has 2 (!crash:1, !crash:1)`},
		{"j1a1w1!crash:x", `"x" is not a step number; crash:N needs a step from 1, like crash:3`},
		{"j1a1w1!crash:", `"" is not a step number; crash:N needs a step from 1`},
		{"j1a1w1@1:0", "can only overlap a delivery started before it"},
		{"j1a1w1 > j1a2w2@1:x", "want @delivery:steps"},
		{"late j1a1w1", "only a producer's copy (job 2 and up) can be enqueued late"},
		{"j1a1w1 > j2a1w2 > late j2a2w3", "job 2 is enqueued by an earlier delivery of it already"},
		{"j1a1w1 > late late j2a1w2", `want "j" next`},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			_, err := faults.Parse(tt.text)
			if err == nil {
				t.Fatalf("Parse(%q) = nil error, want one containing %q", tt.text, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "schedule ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse(%q) error = %q, want it to name the schedule and contain %q", tt.text, err, tt.want)
			}
		})
	}
}

func TestDefaultExpandsFromTheCleanRun(t *testing.T) {
	plan := faults.Plan{Steps: []faults.Step{
		{SQL: "BEGIN", Local: true}, {SQL: "INSERT INTO ledger ..."}, {SQL: "COMMIT", CommitPoint: true},
	}}
	var got []string
	for _, f := range faults.Default() {
		for _, s := range f.Schedules(plan) {
			if s.Fault != f.Name() {
				t.Errorf("schedule %s: Fault = %q, want %q", s, s.Fault, f.Name())
			}
			if err := s.Validate(); err != nil {
				t.Errorf("schedule %s: %v", s, err)
			}
			got = append(got, string(s.Fault)+": "+s.String())
		}
	}
	want := []string{
		"run-twice: j1a1w1 > j1a2w2",
		"producer-retry: j1a1w1 > j2a1w2",
		"crash-before-ack: j1a1w1!crash > +30s j1a2w2",
		"lost-ack: j1a1w1!lostack > +30s j1a2w1",
		"lost-ack: j1a1w1!lostack > +30s j1a2w2",
		// Crashes before BEGIN, before the INSERT and before COMMIT all
		// roll back to nothing: one class, its last point run.
		"crash-mid-job: j1a1w1!crash:3 > +30s j1a2w2",
		"ambiguous-commit: j1a1w1!ambiguous:3 > +30s j1a2w2",
		"visibility-timeout: j1a1w1 > +30s j1a2w2@1:1 order 1,2,2,2,1,1",
		"visibility-timeout: j1a1w1 > +30s j1a2w2@1:2 order 1,1,2,2,2,1",
		"visibility-timeout: j1a1w1 > +30s j1a2w2@1:3 order 1,1,1,2,2,2",
	}
	if diff := cmp.Diff(want, got[:len(want)]); diff != "" {
		t.Errorf("default matrix mismatch (-want +got):\n%s", diff)
	}
	// Of the C(6,3) = 20 interleavings, the BEGINs commute with every
	// step, so 6 classes (C(4,2) orders of the other steps) each for the
	// two concurrent faults, then two redrives: one for the crash points
	// inside the transaction, one after the last step.
	if n := len(got) - len(want); n != 14 {
		t.Errorf("concurrent and redrive schedules = %d, want 14", n)
	}
	wantRedrive := []string{
		"redrive: j1a1w1!crash:3 > +72h j1a2w2",
		"redrive: j1a1w1!crash > +72h j1a2w2",
	}
	if diff := cmp.Diff(wantRedrive, got[len(got)-2:]); diff != "" {
		t.Errorf("redrive schedules mismatch (-want +got):\n%s", diff)
	}
}

// A lost answer and a refusal hit every effect call of the clean run, and
// only effect calls: one delivery each, whose failure the queue retries.
func TestEffectFaultsAtEveryEffectCall(t *testing.T) {
	plan := faults.Plan{Steps: []faults.Step{
		{SQL: "SELECT status FROM orders"},
		{SQL: "payment key=order-1 amount=500", Effect: "payment", Key: "order-1"},
		{SQL: "UPDATE orders SET status = 'paid'", CommitPoint: true},
		{SQL: "email to=a@b subject=Paid", Effect: "email"},
	}}
	var got []string
	for _, f := range faults.Default() {
		for _, s := range f.Schedules(plan) {
			if f.Name() == faults.NameEffectLostReply || f.Name() == faults.NameEffectFailed {
				got = append(got, string(s.Fault)+": "+s.String())
			}
		}
	}
	want := []string{
		"effect-lost-reply: j1a1w1!lostreply:2",
		"effect-lost-reply: j1a1w1!lostreply:4",
		"effect-failed: j1a1w1!failed:2",
		"effect-failed: j1a1w1!failed:4",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("effect fault schedules mismatch (-want +got):\n%s", diff)
	}
	for _, f := range []faults.Fault{faults.EffectLostReplyAt(4), faults.EffectFailedAt(2)} {
		s := f.Schedules(plan)
		if len(s) != 1 || s[0].Deliveries[0].At != map[faults.Name]int{faults.NameEffectLostReply: 4, faults.NameEffectFailed: 2}[f.Name()] {
			t.Errorf("%s: schedules %v, want one at its step", f.Name(), s)
		}
	}
	// A job without effect calls gets none.
	noEffects := faults.Plan{Steps: plan.Steps[:1]}
	for _, f := range []faults.Fault{faults.EffectLostReplies(), faults.EffectFailures()} {
		if s := f.Schedules(noEffects); len(s) != 0 {
			t.Errorf("%s on a job without effects: %v, want none", f.Name(), s)
		}
	}
}

func TestInterleavings(t *testing.T) {
	all := faults.Interleavings(2, 2, 100)
	want := [][]int{{1, 1, 2, 2}, {1, 2, 1, 2}, {1, 2, 2, 1}, {2, 1, 1, 2}, {2, 1, 2, 1}, {2, 2, 1, 1}}
	if diff := cmp.Diff(want, all); diff != "" {
		t.Errorf("Interleavings(2, 2) mismatch (-want +got):\n%s", diff)
	}

	sample := faults.Interleavings(5, 5, 24) // 252 in all
	if len(sample) != 24 {
		t.Fatalf("len = %d, want 24", len(sample))
	}
	seen := map[string]bool{}
	for _, o := range sample {
		ones := 0
		for _, v := range o {
			if v == 1 {
				ones++
			}
		}
		if len(o) != 10 || ones != 5 {
			t.Errorf("order %v is not 5 steps of each delivery", o)
		}
		if seen[cmp.Diff(nil, o)] {
			t.Errorf("order %v repeated", o)
		}
		seen[cmp.Diff(nil, o)] = true
	}
	// The one-delivery-inside-the-other orders come first: the seed's
	// check-then-act race needs d2 whole between d1's SELECT and its write.
	if diff := cmp.Diff([]int{1, 1, 2, 2, 2, 2, 2, 1, 1, 1}, sample[2]); diff != "" {
		t.Errorf("sample[2] mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(sample, faults.Interleavings(5, 5, 24)); diff != "" {
		t.Errorf("the sample is not deterministic:\n%s", diff)
	}
}

func names(fs []faults.Fault) []string {
	var out []string
	for _, f := range fs {
		out = append(out, string(f.Name()))
	}
	return out
}

func TestDefaultWithout(t *testing.T) {
	all := names(faults.Default())
	tests := []struct {
		name string
		drop []faults.Name
		want []string
	}{
		{"nothing dropped", nil, all},
		{"the visibility timeout", []faults.Name{faults.NameVisibilityTimeout},
			[]string{"run-twice", "producer-retry", "late-producer-retry", "producer-retry-after-dedup", "crash-before-ack", "lost-ack", "crash-mid-job", "ambiguous-commit", "effect-lost-reply", "effect-slow", "effect-failed", "concurrent-delivery", "concurrent-producer-retry", "redrive"}},
		{"several, in any order, one twice", []faults.Name{faults.NameRedrive, faults.NameRunTwice, faults.NameConcurrentDelivery, faults.NameRedrive, faults.NameEffectFailed},
			[]string{"producer-retry", "late-producer-retry", "producer-retry-after-dedup", "crash-before-ack", "lost-ack", "crash-mid-job", "ambiguous-commit", "effect-lost-reply", "effect-slow", "visibility-timeout", "concurrent-producer-retry"}},
		{"every one", []faults.Name{
			faults.NameRunTwice, faults.NameProducerRetry, faults.NameLateProducerRetry, faults.NameProducerRetryAfterDedup, faults.NameCrashBeforeAck, faults.NameLostAck, faults.NameCrashMidJob,
			faults.NameAmbiguousCommit, faults.NameEffectLostReply, faults.NameEffectSlow, faults.NameEffectFailed, faults.NameVisibilityTimeout,
			faults.NameConcurrentDelivery, faults.NameConcurrentProducerRetry, faults.NameRedrive,
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := faults.DefaultWithout(tt.drop...)
			if diff := cmp.Diff(tt.want, names(got)); diff != "" {
				t.Errorf("DefaultWithout mismatch (-want +got):\n%s", diff)
			}
			for _, f := range got {
				if err := f.Validate(); err != nil {
					t.Errorf("%s: Validate() = %v, want nil", f.Name(), err)
				}
			}
		})
	}
}

// A name of no default fault cannot drop anything: it comes back as a
// fault the harness refuses, so a typo is not a silent no-op.
func TestDefaultWithoutAnUnknownName(t *testing.T) {
	got := faults.DefaultWithout(faults.NameReplay, faults.NameRedrive)
	if len(got) != len(faults.Default()) {
		t.Fatalf("%d faults, want %d: the default minus redrive, plus the refused name", len(got), len(faults.Default()))
	}
	last := got[len(got)-1]
	err := last.Validate()
	if last.Name() != faults.NameReplay || err == nil || !strings.Contains(err.Error(), `faults.DefaultWithout("replay"): no fault of the default matrix is named so`) {
		t.Errorf("last fault = %s with Validate() = %v, want replay refused as no default fault", last.Name(), err)
	}
	if s := last.Schedules(faults.Plan{Steps: []faults.Step{{SQL: "UPDATE t SET n = 1", CommitPoint: true}}}); len(s) != 0 {
		t.Errorf("a refused fault expands to %v, want nothing", s)
	}
}

// Constructors given an argument out of range make a fault that says so
// and expands to nothing, for the harness to refuse with the message.
func TestConstructorsRefuseBadArguments(t *testing.T) {
	plan := faults.Plan{Steps: []faults.Step{{SQL: "UPDATE t SET n = 1", CommitPoint: true}}}
	tests := []struct {
		fault faults.Fault
		want  string
	}{
		{faults.Redrive(0), "faults.Redrive(0s): a redrive comes after the crash"},
		{faults.Redrive(-time.Hour), "faults.Redrive(-1h0m0s): a redrive comes after the crash"},
		{faults.ConcurrentDelivery(faults.MaxInterleavings(0)), "faults.MaxInterleavings(0): a concurrent fault tries at least one interleaving"},
		{faults.ConcurrentProducerRetry(faults.MaxInterleavings(-3)), "faults.MaxInterleavings(-3)"},
		{faults.ConcurrentDelivery(nil), "faults.ConcurrentDelivery: a nil option"},
		{faults.CrashAt(0), "faults.CrashAt(0): steps count from 1; for a crash after the last step use faults.CrashBeforeAck()"},
		{faults.AmbiguousCommitAt(-1), "faults.AmbiguousCommitAt(-1): steps count from 1"},
		{faults.EffectLostReplyAt(0), "faults.EffectLostReplyAt(0)"},
		{faults.EffectFailedAt(0), "faults.EffectFailedAt(0)"},
		{faults.EffectOutageAt(0), "faults.EffectOutageAt(0): steps count from 1"},
		{faults.EffectSlowAt(-2), "faults.EffectSlowAt(-2): steps count from 1"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			err := tt.fault.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.want)
			}
			if s := tt.fault.Schedules(plan); len(s) != 0 {
				t.Errorf("Schedules = %v, want none", s)
			}
		})
	}
	for _, f := range []faults.Fault{faults.Redrive(time.Minute), faults.ConcurrentDelivery(faults.MaxInterleavings(1)), faults.CrashAt(1)} {
		if err := f.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v, want nil", f.Name(), err)
		}
	}
}

// Redrive(after) moves the clock by after before the redelivery.
func TestRedriveAfter(t *testing.T) {
	plan := faults.Plan{Steps: []faults.Step{{SQL: "UPDATE t SET n = 1", CommitPoint: true}}}
	var got []string
	for _, s := range faults.Redrive(7 * 24 * time.Hour).Schedules(plan) {
		got = append(got, s.String())
	}
	want := []string{"j1a1w1!crash:1 > +168h j1a2w2", "j1a1w1!crash > +168h j1a2w2"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Redrive(168h) mismatch (-want +got):\n%s", diff)
	}
}

// MaxInterleavings caps the orders a concurrent fault runs; the orders
// beyond the cap are neither run nor left for a fallback.
func TestMaxInterleavings(t *testing.T) {
	plan := faults.Plan{Steps: []faults.Step{{SQL: "SELECT 1"}, {SQL: "UPDATE t SET n = 1"}, {SQL: "SELECT 2"}}}
	orders := func(f faults.Fault) int {
		n := 0
		for _, s := range f.Schedules(plan) {
			if len(s.Holds) == 0 {
				n++
			}
		}
		return n
	}
	if n := orders(faults.ConcurrentDelivery()); n != 20 {
		t.Errorf("ConcurrentDelivery() runs %d orders, want all C(6,3) = 20 (under the default cap of 24)", n)
	}
	if n := orders(faults.ConcurrentDelivery(faults.MaxInterleavings(5))); n != 5 {
		t.Errorf("ConcurrentDelivery(MaxInterleavings(5)) runs %d orders, want 5", n)
	}
	if n := orders(faults.ConcurrentProducerRetry(faults.MaxInterleavings(1))); n != 1 {
		t.Errorf("ConcurrentProducerRetry(MaxInterleavings(1)) runs %d orders, want 1", n)
	}
}

// Each pair of the clean run's autocommit writes is overlapped: the first
// delivery's write runs with its commit held while the second's runs,
// each having run its steps before. Reads, COMMITs and statements in a
// transaction are never held.
func TestConcurrentOverlapsAutocommitWrites(t *testing.T) {
	plan := faults.Plan{Steps: []faults.Step{
		{SQL: "SELECT 1", Autocommit: true},
		{SQL: "INSERT INTO bounces ...", CommitPoint: true, Autocommit: true},
		{SQL: "BEGIN", Autocommit: true},
		{SQL: "UPDATE messages ..."},
		{SQL: "COMMIT", CommitPoint: true},
		{SQL: "UPDATE messages ...", CommitPoint: true, Autocommit: true},
	}}
	var got []string
	for _, s := range faults.ConcurrentDelivery().Schedules(plan) {
		if len(s.Holds) > 0 {
			if err := s.Validate(); err != nil {
				t.Errorf("%s: %v", s, err)
			}
			got = append(got, s.String())
		}
	}
	want := []string{
		"j1a1w1 > j1a2w2@1:0 order 1,2,1~,2",
		"j1a1w1 > j1a2w2@1:0 order 1,2,2,2,2,2,1~,2",
		"j1a1w1 > j1a2w2@1:0 order 1,1,1,1,1,2,1~,2",
		"j1a1w1 > j1a2w2@1:0 order 1,1,1,1,1,2,2,2,2,2,1~,2",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("overlapped statements mismatch (-want +got):\n%s", diff)
	}

	// Past four writes, each is overlapped only with its own twin.
	var many []faults.Step
	for range 5 {
		many = append(many, faults.Step{SQL: "INSERT ...", CommitPoint: true, Autocommit: true})
	}
	held := 0
	for _, s := range faults.ConcurrentProducerRetry().Schedules(faults.Plan{Steps: many}) {
		if len(s.Holds) > 0 {
			held++
		}
	}
	if held != 5 {
		t.Errorf("five autocommit writes: %d overlapped schedules, want 5", held)
	}
}

// The seed's ledger job is one autocommit statement: its default matrix
// is the matrix of the same step without overlapping, plus one overlapped
// schedule per concurrent fault, and nothing else.
func TestOverlapsAreAllThatGrows(t *testing.T) {
	ledger := faults.Step{SQL: "WITH added AS (INSERT ... ON CONFLICT DO NOTHING ...) UPDATE ...", CommitPoint: true}
	texts := func(step faults.Step) (plain, held []string) {
		for _, f := range faults.Default() {
			for _, s := range f.Schedules(faults.Plan{Steps: []faults.Step{step}}) {
				text := string(s.Fault) + ": " + s.String()
				if len(s.Holds) > 0 {
					held = append(held, text)
				} else {
					plain = append(plain, text)
				}
			}
		}
		return plain, held
	}
	before, none := texts(ledger)
	ledger.Autocommit = true
	after, held := texts(ledger)
	if len(none) != 0 {
		t.Errorf("a statement in a transaction was overlapped: %v", none)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("the schedules without holds changed (-before +after):\n%s", diff)
	}
	want := []string{
		"concurrent-delivery: j1a1w1 > j1a2w2@1:0 order 1~,2",
		"concurrent-producer-retry: j1a1w1 > j2a1w2@1:0 order 1~,2",
	}
	if diff := cmp.Diff(want, held); diff != "" {
		t.Errorf("overlapped schedules (-want +got):\n%s", diff)
	}
}

// For a queue that hands a job to one delivery at a time, the second
// delivery of concurrent-delivery is never handed out, so the fault is
// its first order alone, without overlapped statements; the producer's
// copy, a job of its own, still runs every order.
func TestOneDeliveryAtATimeRunsOneOrder(t *testing.T) {
	plan := faults.Plan{Steps: []faults.Step{
		{SQL: "BEGIN", Local: true},
		{SQL: "UPDATE accounts ..."},
		{SQL: "COMMIT", CommitPoint: true},
		{SQL: "INSERT INTO ledger ...", CommitPoint: true, Autocommit: true},
	}}
	texts := func(f faults.Fault, p faults.Plan) []string {
		var out []string
		for _, s := range f.Schedules(p) {
			out = append(out, s.String())
		}
		return out
	}
	every := texts(faults.ConcurrentDelivery(), plan)
	copies := texts(faults.ConcurrentProducerRetry(), plan)
	plan.OneDeliveryAtATime = true
	one := texts(faults.ConcurrentDelivery(), plan)
	if diff := cmp.Diff([]string{"j1a1w1 > j1a2w2@1:0 order 1,1,1,1,2,2,2,2"}, one); diff != "" {
		t.Errorf("concurrent-delivery, one delivery at a time (-want +got):\n%s", diff)
	}
	if len(every) < 2 || every[0] != one[0] {
		t.Errorf("the one order is not the first of every order %v", every)
	}
	if diff := cmp.Diff(copies, texts(faults.ConcurrentProducerRetry(), plan)); diff != "" {
		t.Errorf("concurrent-producer-retry changed (-every order +one delivery at a time):\n%s", diff)
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{72 * time.Hour, "72h"},
		{90 * time.Minute, "90m"},
		{30 * time.Second, "30s"},
		{0, "0s"},
		{1500 * time.Millisecond, "1.5s"},
		{250 * time.Millisecond, "250ms"},
		{-2 * time.Hour, "-2h"},
	}
	for _, tt := range tests {
		got := faults.FormatDuration(tt.d)
		if got != tt.want {
			t.Errorf("FormatDuration(%v) = %q, want %q", tt.d, got, tt.want)
		}
		if back, err := time.ParseDuration(got); err != nil || back != tt.d {
			t.Errorf("time.ParseDuration(%q) = %v, %v; want %v", got, back, err, tt.d)
		}
	}
}

// The late producer copies of the default matrix come only for a queue
// that dedups: after completion for any dedup, past the window for one
// with a window. LateProducerRetry named by the user always runs.
func TestLateCopiesFollowTheQueuesDedup(t *testing.T) {
	steps := []faults.Step{{SQL: "UPDATE t SET n = n + 1", CommitPoint: true, Autocommit: true}}
	late := func(p faults.Plan) []string {
		var out []string
		for _, f := range faults.Default() {
			if f.Name() != faults.NameLateProducerRetry && f.Name() != faults.NameProducerRetryAfterDedup {
				continue
			}
			for _, s := range f.Schedules(p) {
				out = append(out, string(s.Fault)+": "+s.String())
			}
		}
		return out
	}
	tests := []struct {
		name   string
		dedup  time.Duration
		within time.Duration // Plan.ProducerRetriesWithin
		want   []string
	}{
		{"no dedup", 0, 0, nil},
		{"while held", -1, 0, []string{"late-producer-retry: j1a1w1 > +5s late j2a1w2"}},
		{"a window", time.Hour, 0, []string{"late-producer-retry: j1a1w1 > +5s late j2a1w2", "producer-retry-after-dedup: j1a1w1 > +3601s late j2a1w2"}},
		// A producer that never retries after 30s makes no copy past a
		// 2-minute window; one that retries for 2 hours does.
		{"retries inside the window", 2 * time.Minute, 30 * time.Second, []string{"late-producer-retry: j1a1w1 > +5s late j2a1w2"}},
		{"retries past the window", 2 * time.Minute, 2 * time.Hour, []string{"late-producer-retry: j1a1w1 > +5s late j2a1w2", "producer-retry-after-dedup: j1a1w1 > +121s late j2a1w2"}},
		// The producer's retry comes no later than it ever retries.
		{"retries within 2s", -1, 2 * time.Second, []string{"late-producer-retry: j1a1w1 > +2s late j2a1w2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, late(faults.Plan{Steps: steps, Dedup: tt.dedup, ProducerRetriesWithin: tt.within})); diff != "" {
				t.Errorf("late copies mismatch (-want +got):\n%s", diff)
			}
		})
	}
	// A producer whose timeout is 30s retries then.
	if got := late(faults.Plan{Steps: steps, Dedup: -1, ProducerTimeout: 30 * time.Second}); !slices.Equal(got, []string{"late-producer-retry: j1a1w1 > +30s late j2a1w2"}) {
		t.Errorf("late copy with a 30s producer timeout: %q", got)
	}
	if s := faults.LateProducerRetry().Schedules(faults.Plan{Steps: steps}); len(s) != 1 {
		t.Errorf("LateProducerRetry() without dedup: %v, want its one schedule", s)
	}
}

// ProducerCopyAt is a copy enqueued that long after the original, bound
// by no ProducerRetriesWithin; a time that is not after the original is
// refused.
func TestProducerCopyAt(t *testing.T) {
	p := faults.Plan{Steps: []faults.Step{{SQL: "UPDATE t SET n = n + 1", CommitPoint: true, Autocommit: true}}, Dedup: 2 * time.Minute, ProducerRetriesWithin: 30 * time.Second}
	f := faults.ProducerCopyAt(5 * time.Minute)
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range f.Schedules(p) {
		got = append(got, string(s.Fault)+": "+s.String())
	}
	if diff := cmp.Diff([]string{"producer-copy-at: j1a1w1 > +5m late j2a1w2"}, got); diff != "" {
		t.Errorf("ProducerCopyAt(5m) mismatch (-want +got):\n%s", diff)
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if err := faults.ProducerCopyAt(d).Validate(); err == nil || !strings.Contains(err.Error(), "give a positive duration") {
			t.Errorf("ProducerCopyAt(%v): %v, want it refused", d, err)
		}
	}
}

// TestEveryKindParsesBack: each kind's text, written in a schedule, reads
// back as that kind, and no two kinds share a text.
func TestEveryKindParsesBack(t *testing.T) {
	seen := map[string]faults.Kind{}
	for k := faults.KindCrash; k <= faults.KindEffectSlow; k++ {
		text := k.String()
		if text == "" {
			t.Fatalf("Kind(%d) has no text", k)
		}
		if o, dup := seen[text]; dup {
			t.Errorf("Kind(%d) and Kind(%d) both write %q", o, k, text)
		}
		seen[text] = k
		form := "j1a1w1!" + text + ":2"
		if k == faults.KindLostAck {
			form = "j1a1w1!" + text
		}
		s, err := faults.Parse(form)
		if err != nil {
			t.Errorf("Parse(%q): %v", form, err)
			continue
		}
		if got := s.Deliveries[0].Fault; got != k {
			t.Errorf("Parse(%q) fault = %v, want %v", form, got, k)
		}
		if got := s.String(); got != form {
			t.Errorf("Parse(%q).String() = %q", form, got)
		}
	}
	if faults.KindNone.String() != "" || faults.Kind(99).String() != "" || faults.Kind(99).OnEffect() {
		t.Errorf("KindNone and an unknown kind must have no text and act on no effect")
	}
}
