package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/record"
	"github.com/runtwice/twice/internal/report"
)

// diagramRecords are the fixture's records and those of testdata/diagrams:
// untrimmed records harness.Check wrote for creditnotice (an ambiguous
// commit followed by an email) and payouts' random key (effects whose
// keys differ from the clean run's), and chargetimeout's give-up job,
// trimmed to its effect-lost-reply finding and an effect-failed scenario
// (a charge whose answer was lost, then an email), and bounces' racy
// insert trimmed to its two findings (an insert whose commit was held).
func diagramRecords(t *testing.T) []record.Record {
	t.Helper()
	var all []record.Record
	for _, dir := range []string{"records", "diagrams"} {
		recs, err := record.Read(filepath.Join("testdata", dir))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, recs...)
	}
	return all
}

// diagramStep is one step as a diagram draws it or a record says it ran.
type diagramStep struct {
	worker string // W1
	n      int    // the delivery's step number
	kind   string // "sql", "effect" or "died" (the step it died before)
	lost   bool   // applied, or made, but the answer never came back
	held   bool   // its commit waited while the other delivery's step ran
	text   string // the statement, folded; empty for an effect
}

func (s diagramStep) String() string {
	lost := ""
	if s.lost {
		lost = " reply-lost"
	}
	if s.held {
		lost += " commit-held"
	}
	return fmt.Sprintf("%s step %d %s%s %.40q", s.worker, s.n, s.kind, lost, s.text)
}

var (
	numbered   = regexp.MustCompile(`^(\d+)\. (.*)$`)
	diesBefore = regexp.MustCompile(`^dies before step (\d+): (.*)$`)
)

// drawnSteps reads the steps back out of a diagram's events.
func drawnSteps(d report.Diagram) []diagramStep {
	var out []diagramStep
	for i, e := range d.Events {
		switch e.Kind {
		case report.Call:
			m := numbered.FindStringSubmatch(e.Text)
			if m == nil || !strings.HasPrefix(e.From, "W") {
				continue
			}
			s := diagramStep{worker: e.From, kind: "effect"}
			fmt.Sscan(m[1], &s.n)
			if e.To == "DB" {
				s.kind, s.text = "sql", m[2]
			}
			if i+1 < len(d.Events) {
				next := d.Events[i+1]
				s.lost = next.Kind == report.Lost && next.From == e.To && next.To == e.From
				s.held = next.Kind == report.Note && next.From == e.From && strings.HasPrefix(next.Text, "commit held")
			}
			out = append(out, s)
		case report.Crash:
			if m := diesBefore.FindStringSubmatch(e.Text); m != nil {
				s := diagramStep{worker: e.From, kind: "died", text: m[2]}
				fmt.Sscan(m[1], &s.n)
				out = append(out, s)
			}
		}
	}
	return out
}

// recordSteps are the steps of s in the order they ran, from the record
// alone: Order says whose turn each step was, each delivery's Steps what
// it ran and the fate the harness recorded for it.
func recordSteps(s result.Scenario) []diagramStep {
	var out []diagramStep
	taken := map[int]int{}
	for _, o := range s.Order {
		d := s.Deliveries[o-1]
		taken[o]++
		k := taken[o]
		st := d.Steps[k-1]
		ds := diagramStep{worker: fmt.Sprintf("W%d", d.Delivery.Worker), n: k, kind: "sql", held: st.Fate == result.CommitHeld}
		if st.IsEffect() {
			ds.kind = "effect"
		} else {
			ds.text = strings.Join(strings.Fields(st.SQL), " ")
		}
		switch st.Fate {
		case result.CrashedBefore:
			ds.kind, ds.text = "died", strings.Join(strings.Fields(st.SQL), " ")
		case result.ReplyLost, result.CrashedAfter, result.TimedOut:
			// Applied, or made, and the answer never came back.
			ds.lost = true
		}
		out = append(out, ds)
	}
	return out
}

// Every finding's diagram shows each step of the scenario's record, in
// the order it ran, with the kind it had: statements to the database,
// effect calls to their provider, the step a crash kept from running, and
// a step applied whose answer was lost.
func TestDiagramStepsMatchRecords(t *testing.T) {
	seen := map[string]int{}
	for _, rec := range diagramRecords(t) {
		b := &builder{runs: newTestRuns(), dirs: map[string]string{}, cwd: "/src/twice"}
		j := b.job([]record.Record{rec})
		scenarios := map[string]result.Scenario{}
		for _, s := range rec.Result.Scenarios {
			scenarios[s.Schedule.String()] = s
		}
		for _, f := range j.Findings {
			s, ok := scenarios[f.Schedule]
			if !ok {
				t.Fatalf("%s: finding %s has no scenario", rec.Test, f.Schedule)
			}
			got := drawnSteps(report.BuildDiagram(j, f))
			want := recordSteps(s)
			for i := range want {
				for _, mark := range []string{"…", "..."} { // the diagram's cut, text.OneLine's
					if i < len(got) && strings.HasSuffix(got[i].text, mark) {
						// The diagram cuts a long statement; compare what it shows.
						cut := strings.TrimSuffix(got[i].text, mark)
						if strings.HasPrefix(want[i].text, cut) {
							want[i].text = got[i].text
						}
					}
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s %s: the diagram's steps differ from the record's\n got: %v\nwant: %v", rec.Test, f.Schedule, got, want)
			}
			for _, st := range want {
				switch {
				case st.kind == "died":
					seen["death before a step"]++
				case st.lost && st.kind == "sql":
					seen["ambiguous statement"]++
				case st.lost && st.kind == "effect":
					seen["effect answer lost"]++
				case st.held:
					seen["held commit"]++
				}
			}
		}
	}
	// The fixtures must hold the cases this test is for.
	for _, k := range []string{"death before a step", "ambiguous statement", "effect answer lost", "held commit"} {
		if seen[k] == 0 {
			t.Errorf("no %s in the fixtures' findings", k)
		}
	}
}

// report.json lists the ambiguous commit among the delivery's steps, in
// the place it ran, marked: before, it was left out and the email after
// it took its number.
func TestReportStepsKeepTheFaultedStep(t *testing.T) {
	for _, rec := range diagramRecords(t) {
		if rec.Test != "TestRewardWithNotice" {
			continue
		}
		b := &builder{runs: newTestRuns(), dirs: map[string]string{}, cwd: "/src/twice"}
		j := b.job([]record.Record{rec})
		if len(j.Findings) != 1 {
			t.Fatalf("findings = %d, want 1 (the ambiguous commit)", len(j.Findings))
		}
		var got []string
		for _, s := range j.Findings[0].Deliveries[0].Steps {
			got = append(got, fmt.Sprintf("%s|%s|%s", s.Effect, strings.Fields(s.Text)[0], s.Fate))
		}
		want := []string{"|begin|ran", "|INSERT|ran", "|UPDATE|ran", "|commit|" + string(result.ReplyLost), "email|email|ran"}
		if !slices.Equal(got, want) {
			t.Errorf("steps of j1a1w1 = %q, want %q", got, want)
		}
		return
	}
	t.Fatal("no record of TestRewardWithNotice in testdata/diagrams")
}

// A charge whose answer was lost is marked in place among the delivery's
// steps, and drawn from both sides: the provider made it, the worker got
// a timeout and went on to mark the order and send the email.
func TestReportShowsAnEffectsLostAnswer(t *testing.T) {
	for _, rec := range diagramRecords(t) {
		if rec.Test != "TestGiveUpOnTimeout" {
			continue
		}
		b := &builder{runs: newTestRuns(), dirs: map[string]string{}, cwd: "/src/twice"}
		j := b.job([]record.Record{rec})
		if len(j.Findings) != 1 {
			t.Fatalf("findings = %d, want 1 (the lost answer)", len(j.Findings))
		}
		f := j.Findings[0]
		var got []string
		for _, s := range f.Deliveries[0].Steps {
			got = append(got, fmt.Sprintf("%s|%s|%s", s.Effect, strings.Fields(s.Text)[0], s.Fate))
		}
		want := []string{"|SELECT|ran", "payment|payment|" + string(result.TimedOut), "|UPDATE|ran", "email|email|ran"}
		if !slices.Equal(got, want) {
			t.Errorf("steps of j1a1w1 = %q, want %q", got, want)
		}
		if len(f.Effects) == 0 || !f.Effects[0].ReplyLost {
			t.Errorf("the payment's effect is not marked reply_lost: %+v", f.Effects)
		}
		var events []string
		for _, e := range report.BuildDiagram(j, f).Events {
			events = append(events, fmt.Sprintf("%d %s>%s %.30s", e.Kind, e.From, e.To, e.Text))
		}
		wantEvents := []string{
			"0 Q>W1 deliver job 1, attempt 1",
			"0 W1>DB 1. SELECT email, customer, tot",
			"0 W1>P3 2. payment key=charge-order-98",
			"2 P3>W1 done: py_1, but the answer is ",
			"4 W1> timeout error; goes on",
			"0 W1>DB 3. UPDATE orders SET status = ",
			"0 W1>P4 4. email to=asha@example.com s",
			"1 P4>W1 done",
			"0 W1>Q ack",
		}
		if !slices.Equal(events, wantEvents) {
			t.Errorf("events:\n%s\nwant:\n%s", strings.Join(events, "\n"), strings.Join(wantEvents, "\n"))
		}
		return
	}
	t.Fatal("no record of TestGiveUpOnTimeout in testdata/diagrams")
}

// Each finding's effect diff shows its own scenario's keys (a random key
// per attempt), and findings are grouped only when their diffs are the
// same: before, every line showed the clean run's key, so every finding
// looked alike and showed the first one's diff.
func TestEffectDiffShowsOwnValues(t *testing.T) {
	for _, rec := range diagramRecords(t) {
		if rec.Test != "TestWithRandomKey" {
			continue
		}
		b := &builder{runs: newTestRuns(), dirs: map[string]string{}, cwd: "/src/twice"}
		j := b.job([]record.Record{rec})
		scenarios := map[string]result.Scenario{}
		for _, s := range rec.Result.Scenarios {
			scenarios[s.Schedule.String()] = s
		}
		if len(j.Findings) < 2 {
			t.Fatalf("findings = %d, want several", len(j.Findings))
		}
		for _, f := range j.Findings {
			s := scenarios[f.Schedule]
			for _, e := range s.Effects {
				if e.Key != "" && !strings.Contains(f.EffectDiff, "key="+e.Key) {
					t.Errorf("%s: the effect diff lacks the scenario's key %s:\n%s", f.Schedule, e.Key, f.EffectDiff)
				}
			}
		}
		return
	}
	t.Fatal("no record of TestWithRandomKey in testdata/diagrams")
}

// TestFindingsAlikeButForRandomKeysAreGrouped: payouts' job draws a
// random idempotency key per delivery, so no two findings' effect diffs
// are equal as text; alike but for those keys, they are shown once, as
// state differences are, and the others name the one shown.
func TestFindingsAlikeButForRandomKeysAreGrouped(t *testing.T) {
	for _, rec := range diagramRecords(t) {
		if rec.Test != "TestWithRandomKey" {
			continue
		}
		b := &builder{runs: newTestRuns(), dirs: map[string]string{}, cwd: "/src/twice"}
		j := b.job([]record.Record{rec})
		shown := j.Shown()
		t.Logf("%d findings, %d shown", len(j.Findings), len(shown))
		if len(j.Findings) < 4 || len(shown) > 2 {
			t.Errorf("%d findings, %d of them shown; want the ones alike but for their keys shown once", len(j.Findings), len(shown))
		}
		for _, f := range j.Findings {
			if f.SameAs == "" {
				continue
			}
			var first report.Finding
			for _, g := range j.Findings {
				if g.Schedule == f.SameAs {
					first = g
				}
			}
			if first.Difference != f.Difference {
				t.Errorf("%s is named the same as %s, but their Difference ids are %s and %s", f.Schedule, f.SameAs, f.Difference, first.Difference)
			}
		}
		return
	}
	t.Fatal("no record of TestWithRandomKey in testdata/diagrams")
}

var (
	delivered = regexp.MustCompile(`job (\d+).*, attempt (\d+)`)
	whileN    = regexp.MustCompile(`while (\S+) has taken (\d+) steps?`)
)

// A delivery that starts while another runs says how many steps the
// other has taken, and that count is the steps the diagram drew for it
// above: before, it was the schedule's count of completed steps, so
// bounces' diagram drew j1a1w1's held step 1 and then said j1a1w1 had
// taken 0 steps.
func TestDiagramStepCountsMatchDrawnSteps(t *testing.T) {
	var checked, held int
	for _, rec := range diagramRecords(t) {
		b := &builder{runs: newTestRuns(), dirs: map[string]string{}, cwd: "/src/twice"}
		j := b.job([]record.Record{rec})
		for _, f := range j.Findings {
			label := map[[2]int]string{} // job, attempt -> delivery label
			for _, d := range f.Deliveries {
				label[[2]int{d.Job, d.Attempt}] = d.Label
			}
			on := map[string]string{} // worker -> the delivery it runs
			drawn := map[string]int{} // delivery label -> steps drawn
			for _, e := range report.BuildDiagram(j, f).Events {
				if e.Kind == report.Call && e.From == "Q" {
					if m := delivered.FindStringSubmatch(e.Text); m != nil {
						var job, attempt int
						fmt.Sscan(m[1], &job)
						fmt.Sscan(m[2], &attempt)
						on[e.To] = label[[2]int{job, attempt}]
					}
					if m := whileN.FindStringSubmatch(e.Text); m != nil {
						checked++
						if m[2] != fmt.Sprint(drawn[m[1]]) {
							t.Errorf("%s %s: %q, but the diagram drew %d steps of %s before it", rec.Test, f.Schedule, e.Text, drawn[m[1]], m[1])
						}
					}
					continue
				}
				if (e.Kind == report.Call && numbered.MatchString(e.Text)) || (e.Kind == report.Crash && diesBefore.MatchString(e.Text)) {
					drawn[on[e.From]]++
				}
				if e.Kind == report.Note && strings.HasPrefix(e.Text, "commit held") {
					held++
				}
			}
		}
	}
	// The fixtures must hold the case this test is for.
	if checked == 0 || held == 0 {
		t.Errorf("%d overlapping deliveries and %d held commits in the fixtures' findings, want some of each", checked, held)
	}
}
