package faults_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/runtwice/twice/faults"
)

// plan is a clean run of five steps: a transaction of three and two
// autocommit writes, one of them an effect.
var plan = faults.Plan{Steps: []faults.Step{
	{SQL: "begin"},
	{SQL: "insert into t values (1)"},
	{SQL: "commit", CommitPoint: true},
	{SQL: "update u set n = n + 1", CommitPoint: true},
	{SQL: "email receipt", Effect: "email"},
}}

func TestGenerateDrawsValidSchedules(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := faults.Generate(plan, faults.Limits{}).Draw(t, "schedule")
		if err := s.Validate(); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		back, err := faults.Parse(s.String())
		if err != nil {
			t.Fatalf("%s does not parse back: %v", s, err)
		}
		if back.String() != s.String() {
			t.Fatalf("%s parses back as %s", s, back)
		}
		if n := len(s.Deliveries); n < 1 || n > 4 {
			t.Fatalf("%s: %d deliveries, want 1 to 4", s, n)
		}
		attempts := map[int]int{}
		lostAck := map[int]bool{} // workers a lost ack left alive
		workers := 0
		overlap := false
		for i, d := range s.Deliveries {
			attempts[d.Job]++
			switch {
			case d.Job < 1 || d.Job > 2 || (i == 0 && d.Job != 1):
				t.Fatalf("%s: delivery %d carries job %d", s, i+1, d.Job)
			case d.Attempt != attempts[d.Job]:
				t.Fatalf("%s: delivery %d is attempt %d of job %d, want %d", s, i+1, d.Attempt, d.Job, attempts[d.Job])
			case d.Worker <= workers:
				if !lostAck[d.Worker] {
					t.Fatalf("%s: delivery %d reuses worker %d, which no lost ack left alive", s, i+1, d.Worker)
				}
			case d.Worker != workers+1:
				t.Fatalf("%s: delivery %d has worker %d, want the next new one, %d", s, i+1, d.Worker, workers+1)
			}
			workers = max(workers, d.Worker)
			switch d.Fault {
			case faults.KindLostAck:
				lostAck[d.Worker] = true
			case faults.KindCrash:
				lostAck[d.Worker] = false
				if d.At > len(plan.Steps) {
					t.Fatalf("%s: crash at step %d of %d", s, d.At, len(plan.Steps))
				}
			case faults.KindAmbiguous:
				if !slices.Contains([]int{3, 4}, d.At) {
					t.Fatalf("%s: ambiguous at step %d, which is no commit point", s, d.At)
				}
			case faults.KindCrashAfterEffect:
				lostAck[d.Worker] = false
				if d.At != 5 {
					t.Fatalf("%s: crash after an effect at step %d, which is no effect call", s, d.At)
				}
			case faults.KindEffectLostReply, faults.KindEffectFailed:
				if d.At != 5 {
					t.Fatalf("%s: effect fault at step %d, which is no effect call", s, d.At)
				}
			}
			if d.With != 0 {
				overlap = true
				if d.With != i {
					t.Fatalf("%s: delivery %d overlaps delivery %d, want the previous one", s, i+1, d.With)
				}
			}
			if i == 0 && d.Advance != 0 {
				t.Fatalf("%s: the clock moves before the first delivery", s)
			}
			if d.Advance != 0 && d.Advance != 30*time.Second && d.Advance != 72*time.Hour {
				t.Fatalf("%s: clock move %v, want none, 30s or 72h", s, d.Advance)
			}
		}
		if overlap != (len(s.Order) > 0) {
			t.Fatalf("%s: an order without overlapping deliveries, or the reverse", s)
		}
	})
}

// A redelivery after a fault comes once the visibility timeout has
// passed, unless it overlaps the delivery it replaces.
func TestGenerateRedeliversAfterTheVisibilityTimeout(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := faults.Generate(plan, faults.Limits{}).Draw(t, "schedule")
		last := map[int]faults.Kind{}
		for i, d := range s.Deliveries {
			if k, ok := last[d.Job]; ok && k != faults.KindNone && d.With == 0 && d.Advance < 30*time.Second {
				t.Fatalf("%s: delivery %d comes back after a fault without the visibility timeout", s, i+1)
			}
			last[d.Job] = d.Fault
		}
	})
}

// Over many draws the generator reaches every corner of the fault space.
func TestGenerateCoversTheFaultSpace(t *testing.T) {
	gen := faults.Generate(plan, faults.Limits{})
	seen := map[string]bool{}
	for seed := range 3000 {
		s := gen.Example(seed)
		text := s.String()
		for _, mark := range []string{"!crash:", "!crash >", "!ambiguous:", "!lostack", "!lostreply:5", "!failed:5", "@", "+30s", "+72h", " order ", "j2a1", "j2a2", "j1a4", "~"} {
			if strings.Contains(text+" >", mark) {
				seen[mark] = true
			}
		}
		for i, d := range s.Deliveries {
			if i > 0 && d.Worker < s.Deliveries[i-1].Worker {
				seen["worker reused"] = true
			}
		}
	}
	for _, want := range []string{"!crash:", "!crash >", "!ambiguous:", "!lostack", "!lostreply:5", "!failed:5", "@", "+30s", "+72h", " order ", "j2a1", "j2a2", "j1a4", "~", "worker reused"} {
		if !seen[want] {
			t.Errorf("no schedule in 3000 draws has %q", want)
		}
	}
}

func TestGenerateWithoutSteps(t *testing.T) {
	gen := faults.Generate(faults.Plan{}, faults.Limits{Deliveries: 2, Jobs: 1})
	for seed := range 500 {
		s := gen.Example(seed)
		if err := s.Validate(); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		for _, d := range s.Deliveries {
			if d.Job != 1 || d.Fault == faults.KindAmbiguous || d.Fault.OnEffect() || d.At != 0 || len(s.Order) > 0 {
				t.Fatalf("%s: a job without steps can only crash before its ack, with one job ID", s)
			}
		}
	}
}

// Shrinking heads toward the smallest schedule that still fails: here,
// any producer copy that crashes shrinks to one clean delivery and a copy
// crashing before its first step.
func TestGenerateShrinksToTheSmallestSchedule(t *testing.T) {
	tests := []struct {
		name  string
		fails func(faults.Schedule) bool
		want  string // a regular expression
	}{
		{"a producer copy crashes", func(s faults.Schedule) bool {
			for _, d := range s.Deliveries {
				if d.Job == 2 && d.Fault == faults.KindCrash {
					return true
				}
			}
			return false
		}, `j1a1w1 > j2a1w2!crash:1`},
		{"two faults", func(s faults.Schedule) bool {
			n := 0
			for _, d := range s.Deliveries {
				if d.Fault != faults.KindNone {
					n++
				}
			}
			return n >= 2
			// rapid may stop at another fault in the second delivery.
		}, `j1a1w1!crash:1 > \+30s j1a2w2!(crash:1|lostack|ambiguous:3|lostreply:5|failed:5)`},
		{"a lost ack's worker sees the job again", func(s faults.Schedule) bool {
			workers := 0
			for _, d := range s.Deliveries {
				if d.Worker <= workers {
					return true
				}
				workers = max(workers, d.Worker)
			}
			return false
		}, `j1a1w1!lostack > \+30s j1a2w1`},
		{"deliveries overlap", func(s faults.Schedule) bool { return len(s.Order) > 0 },
			`j1a1w1 > j1a2w2@1:0 order 1,1,1,1,1,1,1,1,1,1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var last string
			rec := &rapidTB{name: t.Name()}
			// The claim is about shrinking, not about how soon a search
			// meets a failure: a rare property gets a few searches of
			// rapid's default size, each with a seed of its own.
			for try := 0; try < 5 && !rec.failed; try++ {
				rapid.Check(rec, func(rt *rapid.T) {
					s := faults.Generate(plan, faults.Limits{}).Draw(rt, "schedule")
					if tt.fails(s) {
						last = s.String()
						rt.Fatalf("fails")
					}
				})
			}
			if !rec.failed {
				t.Fatalf("rapid found no failing schedule in 5 searches")
			}
			rec.removeFailFile(t)
			if !regexp.MustCompile("^" + tt.want + "$").MatchString(last) {
				t.Errorf("shrunk to %q, want %q", last, tt.want)
			}
		})
	}
}

// rapidTB stands in for the test so rapid's failure does not fail it.
type rapidTB struct {
	name   string
	failed bool
	errors []string
}

var failFile = regexp.MustCompile(`-rapid\.failfile="([^"]+)"`)

// removeFailFile removes the file rapid saved the failure in, and its
// directories when they are left empty.
func (r *rapidTB) removeFailFile(t *testing.T) {
	for _, e := range r.errors {
		if m := failFile.FindStringSubmatch(e); m != nil {
			if err := os.Remove(m[1]); err != nil {
				t.Errorf("removing rapid's fail file: %v", err)
			}
			for dir := filepath.Dir(m[1]); dir != "." && os.Remove(dir) == nil; dir = filepath.Dir(dir) {
			}
		}
	}
}

func (r *rapidTB) Helper()              {}
func (r *rapidTB) Name() string         { return r.name }
func (r *rapidTB) Logf(string, ...any)  {}
func (r *rapidTB) Log(...any)           {}
func (r *rapidTB) Skipf(string, ...any) {}
func (r *rapidTB) Skip(...any)          {}
func (r *rapidTB) SkipNow()             {}
func (r *rapidTB) Errorf(f string, a ...any) {
	r.failed, r.errors = true, append(r.errors, fmt.Sprintf(f, a...))
}
func (r *rapidTB) Error(...any)              { r.failed = true }
func (r *rapidTB) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (r *rapidTB) Fatal(a ...any)            { panic(fmt.Sprint(a...)) }
func (r *rapidTB) FailNow()                  {}
func (r *rapidTB) Fail()                     { r.failed = true }
func (r *rapidTB) Failed() bool              { return r.failed }

// A job without effect calls never draws an effect fault: it would have
// nothing to act on.
func TestGenerateWithoutEffects(t *testing.T) {
	gen := faults.Generate(faults.Plan{Steps: plan.Steps[:4]}, faults.Limits{})
	for seed := range 500 {
		s := gen.Example(seed)
		for _, d := range s.Deliveries {
			if d.Fault.OnEffect() {
				t.Fatalf("%s: an effect fault on a job without effect calls", s)
			}
		}
	}
}
