package report_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/report"
)

// A long label stays in its lane (between its arrow's ends, or one
// column for a crash or a note) by wrapping at spaces, its row growing to
// hold the lines: before, it was cut with an ellipsis, the commit-held
// note of bounces' diagram read "commit held: step 1 has r…". The full
// text is also in the row's <title>.
func TestDiagramLabelsWrapInLane(t *testing.T) {
	long := "3. INSERT INTO points_ledger (customer_id, order_id, points, reason, created_at) VALUES ($1, $2, 50, 'order_reward', now())"
	held := "commit held: step 1 has run, and commits once the other delivery's next step has run or waits for it"
	d := report.Diagram{
		Participants: []report.Participant{{ID: "Q", Name: "Queue"}, {ID: "W1", Name: "Worker 1"}, {ID: "DB", Name: "Database"}, {ID: "P3", Name: "Email provider"}},
		Events: []report.Event{
			{Kind: report.Call, From: "W1", To: "DB", Text: long},
			{Kind: report.Crash, From: "W1", Text: "dies before step 3: " + long},
			{Kind: report.Call, From: "W1", To: "Q", Text: "fails: " + long},
			{Kind: report.Note, From: "W1", Text: held},
			{Kind: report.Note, From: "W1", Text: "2. payment key=payout-restaurant-381-2026-W42-0123456789abcdef0123456789abcdef"},
		},
	}
	svg := d.SVG("t")
	// One column is 190px, about 28 characters of 12px sans-serif; lines may
	// not run past it.
	const laneChars = 28
	rows := drawnLabels(t, svg)
	if len(rows) != len(d.Events) {
		t.Fatalf("%d rows drawn, want %d:\n%s", len(rows), len(d.Events), svg)
	}
	for i, e := range d.Events {
		lines := rows[i].lines
		if !sameText(lines, e.Text) {
			t.Errorf("row %d reads %q, want the whole label %q", i, lines, e.Text)
		}
		if len(lines) < 2 {
			t.Errorf("row %d: %q on one line, want it wrapped", i, lines)
		}
		for _, l := range lines {
			if n := utf8.RuneCountInString(l); n > laneChars {
				t.Errorf("line %q is %d characters: wider than its lane", l, n)
			}
			if strings.HasSuffix(l, "…") {
				t.Errorf("line %q is cut", l)
			}
		}
		if rows[i].title != e.Text {
			t.Errorf("row %d's <title> is %q, want %q", i, rows[i].title, e.Text)
		}
	}
}

// Every label of the fixture's diagrams is drawn whole, wrapped or not.
func TestDiagramLabelsNotCut(t *testing.T) {
	page, err := fixture(t).HTML()
	if err != nil {
		t.Fatal(err)
	}
	svgs := regexp.MustCompile(`(?s)<svg [^>]*class="sequence".*?</svg>`).FindAllString(string(page), -1)
	if len(svgs) == 0 {
		t.Fatal("the fixture's page has no diagram")
	}
	for _, svg := range svgs {
		for _, r := range drawnLabels(t, svg) {
			if !sameText(r.lines, r.title) {
				t.Errorf("label drawn as %q, want the whole %q", r.lines, r.title)
			}
		}
	}
}

// sameText reports whether lines, wrapped at spaces or inside a word too
// long for a line, read text whole.
func sameText(lines []string, text string) bool {
	drop := strings.NewReplacer(" ", "")
	return drop.Replace(strings.Join(lines, "")) == drop.Replace(text)
}

type drawnRow struct {
	title string
	lines []string
}

var (
	eventRow  = regexp.MustCompile(`<g class="event"><title>([^<]*)</title>(.*?)</g>`)
	textLine  = regexp.MustCompile(`<text [^>]*>([^<]*)</text>`)
	unescaper = strings.NewReplacer("&#39;", "'", "&#34;", `"`, "&lt;", "<", "&gt;", ">", "&amp;", "&")
)

// drawnLabels reads each event row's <title> and the lines of text drawn
// for it back out of svg.
func drawnLabels(t *testing.T, svg string) []drawnRow {
	t.Helper()
	var rows []drawnRow
	for _, m := range eventRow.FindAllStringSubmatch(svg, -1) {
		r := drawnRow{title: unescaper.Replace(m[1])}
		for _, l := range textLine.FindAllStringSubmatch(m[2], -1) {
			r.lines = append(r.lines, unescaper.Replace(l[1]))
		}
		rows = append(rows, r)
	}
	return rows
}

func TestTitleIsPlain(t *testing.T) {
	for _, c := range []struct {
		s    report.Summary
		want string
	}{
		{report.Summary{Jobs: 22, Idempotent: 20, ExpectedFinding: 2}, "No findings: 20 idempotent, 2 known not idempotent (expected)"},
		{report.Summary{Jobs: 3, Idempotent: 3}, "All 3 jobs idempotent"},
		{report.Summary{Jobs: 1, Idempotent: 1}, "1 job idempotent"},
		{report.Summary{}, "No job was checked"},
		{report.Summary{Jobs: 22, Idempotent: 20, Finding: 2}, "2 jobs not idempotent"},
		{report.Summary{Jobs: 2, Idempotent: 1, Flaky: 1}, "1 job flaky"},
		{report.Summary{Jobs: 1, Idempotent: 1, Problems: []report.Problem{{Kind: report.ProblemBuildFailed, Fatal: true}}}, "Not every job could be checked: build failed"},
	} {
		r := &report.Report{Summary: c.s}
		for range c.s.Jobs {
			r.Jobs = append(r.Jobs, report.Job{})
		}
		for i := range r.Jobs {
			switch {
			case i < c.s.Idempotent:
				r.Jobs[i].Outcome = report.OutcomeIdempotent
			case i < c.s.Idempotent+c.s.ExpectedFinding:
				r.Jobs[i].Outcome = report.OutcomeExpected
			case i < c.s.Idempotent+c.s.ExpectedFinding+c.s.Flaky:
				r.Jobs[i].Outcome = report.OutcomeFlaky
			default:
				r.Jobs[i].Outcome = report.OutcomeFinding
			}
		}
		r.Finish()
		if got := r.Title(); got != c.want {
			t.Errorf("Title() = %q, want %q", got, c.want)
		}
	}
}

// The same-difference line names schedules in <code>, not in Markdown's
// backticks, on the HTML page.
func TestSameDifferenceHTML(t *testing.T) {
	html, err := fixture(t).HTML()
	if err != nil {
		t.Fatal(err)
	}
	lines := regexp.MustCompile(`The same difference under: .*`).FindAllString(string(html), -1)
	if len(lines) == 0 {
		t.Fatal("the fixture's page has no same-difference line")
	}
	for _, l := range lines {
		if strings.Contains(l, "`") || !strings.Contains(l, "<code>") {
			t.Errorf("same-difference line not marked up as HTML: %s", l)
		}
	}
}

// Every check's testcase carries its scenarios' time, not 0.
func TestJUnitTimes(t *testing.T) {
	data, err := fixture(t).JUnit()
	if err != nil {
		t.Fatal(err)
	}
	cases := regexp.MustCompile(`<testcase name="Test[^"]*/[^"]*" [^>]*time="([^"]*)"`).FindAllStringSubmatch(string(data), -1)
	if len(cases) == 0 {
		t.Fatal("no check testcases")
	}
	for _, c := range cases {
		if c[1] == "0.000" {
			t.Errorf("%s: time 0", c[0])
		}
	}
}

// An ambiguous effect call: the provider made it, the answer was lost
// and the worker died; it neither acks nor fails.
func TestDiagramAmbiguousEffect(t *testing.T) {
	j := report.Job{Steps: []report.Step{{Text: "begin"}, {Text: "email to=a@b", Effect: "email"}}}
	f := report.Finding{
		Order: []int{1, 1, 2, 2},
		Deliveries: []report.Delivery{
			{Label: "j1a1w1", Job: 1, Attempt: 1, Worker: 1, Fault: faults.KindAmbiguous.String(), At: 2,
				Steps: []report.Step{{Text: "begin"}, {Text: "email to=a@b", Effect: "email", Fate: result.CrashedAfter}}},
			{Label: "j1a2w2", Job: 1, Attempt: 2, Worker: 2, Steps: j.Steps},
		},
		Effects: []report.Effect{{Kind: "email", Text: "email to=a@b", Delivery: "j1a1w1"}, {Kind: "email", Text: "email to=a@b", Delivery: "j1a2w2"}},
	}
	var got []string
	for _, e := range report.BuildDiagram(j, f).Events {
		got = append(got, fmt.Sprintf("%d %s>%s %s", e.Kind, e.From, e.To, e.Text))
	}
	want := []string{
		"0 Q>W1 deliver job 1, attempt 1",
		"0 W1>DB 1. begin",
		"0 W1>P4 2. email to=a@b",
		"2 P4>W1 done, but the answer is lost",
		"3 W1> dies before it hears back from step 2",
		"0 Q>W2 deliver job 1, attempt 2",
		"0 W2>DB 1. begin",
		"0 W2>P4 2. email to=a@b",
		"1 P4>W2 done",
		"0 W2>Q ack",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// An effect call whose answer was lost: the provider's side shows the
// payment made, the worker's a timeout it lives through; it retries with
// the same key and gets the stored answer. A refused call shows a 503 and
// nothing done.
func TestDiagramEffectFaults(t *testing.T) {
	j := report.Job{Steps: []report.Step{{Text: "payment key=k", Effect: "payment"}, {Text: "insert"}}}
	tests := []struct {
		name string
		f    report.Finding
		want []string
	}{
		{"lost reply", report.Finding{
			Order: []int{1, 1, 1},
			Deliveries: []report.Delivery{{Label: "j1a1w1", Job: 1, Attempt: 1, Worker: 1, Fault: faults.KindEffectLostReply.String(), At: 1,
				Steps: []report.Step{{Text: "payment key=k", Effect: "payment", Fate: result.TimedOut}, {Text: "payment key=k", Effect: "payment"}, {Text: "insert"}}}},
			Effects: []report.Effect{
				{Kind: "payment", Text: "payment key=k", Delivery: "j1a1w1", Result: "py_1", ReplyLost: true},
				{Kind: "payment", Text: "payment key=k", Delivery: "j1a1w1", Result: "py_1", Replayed: true},
			},
		}, []string{
			"0 Q>W1 deliver job 1, attempt 1",
			"0 W1>P3 1. payment key=k",
			"2 P3>W1 done: py_1, but the answer is lost",
			"4 W1> timeout error; goes on",
			"0 W1>P3 2. payment key=k",
			"1 P3>W1 stored answer, not done again",
			"0 W1>DB 3. insert",
			"0 W1>Q ack",
		}},
		{"refused", report.Finding{
			Order: []int{1, 2, 2},
			Deliveries: []report.Delivery{
				{Label: "j1a1w1", Job: 1, Attempt: 1, Worker: 1, Fault: faults.KindEffectFailed.String(), At: 1, Err: "[twice] payment provider: 503 service unavailable",
					Steps: []report.Step{{Text: "payment key=k", Effect: "payment", Fate: result.Refused}}},
				{Label: "j1a2w2", Job: 1, Attempt: 2, Worker: 2, Advance: 30_000, QueueRetry: true, Steps: j.Steps},
			},
			Effects: []report.Effect{
				{Kind: "payment", Text: "payment key=k", Delivery: "j1a1w1", Err: "[twice] payment provider: 503 service unavailable"},
				{Kind: "payment", Text: "payment key=k", Delivery: "j1a2w2", Result: "py_1"},
			},
		}, []string{
			"0 Q>W1 deliver job 1, attempt 1",
			"0 W1>P4 1. payment key=k",
			"1 P4>W1 503, refused: not done",
			"0 W1>Q fails: [twice] payment provider: 503 service unavailable",
			"4 Q> clock +30s",
			"0 Q>W2 retry job 1, attempt 2",
			"0 W2>P4 1. payment key=k",
			"1 P4>W2 done: py_1",
			"0 W2>DB 2. insert",
			"0 W2>Q ack",
		}},
	}
	tests = append(tests, struct {
		name string
		f    report.Finding
		want []string
	}{"late copy of a scheduled job", report.Finding{
		Order: []int{1, 2},
		Deliveries: []report.Delivery{
			{Label: "j1a1w1", Job: 1, Attempt: 1, Worker: 1, Waited: 10_000, Steps: j.Steps[1:]},
			{Label: "j2a1w2", Job: 2, Attempt: 1, Worker: 2, Late: true, Advance: 3_601_000, Steps: j.Steps[1:]},
		},
	}, []string{
		"4 Q> clock +10s: the job is due",
		"0 Q>W1 deliver job 1, attempt 1",
		"0 W1>DB 1. insert",
		"0 W1>Q ack",
		"4 Q> clock +3601s",
		"4 Q> the producer enqueues job 2 only now",
		"0 Q>W2 deliver job 2 (a producer copy), attempt 1",
		"0 W2>DB 1. insert",
		"0 W2>Q ack",
	}})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, e := range report.BuildDiagram(j, tt.f).Events {
				got = append(got, fmt.Sprintf("%d %s>%s %s", e.Kind, e.From, e.To, e.Text))
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// A kept database that was dumped, because its server stopped with the
// test binary, is named with its dump file, which outlives the run.
func TestKeptDumpShown(t *testing.T) {
	r := fixture(t)
	var f *report.Finding
	for ji := range r.Jobs {
		if fs := r.Jobs[ji].Findings; len(fs) > 0 && f == nil {
			f = &fs[0]
		}
	}
	if f == nil {
		t.Fatal("the fixture has no finding")
	}
	f.Dump = "/tmp/twice-kept-0/twice_kept_0123abcd_2.sql"
	html, err := r.HTML()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(html), "dumped to <code>/tmp/twice-kept-0/twice_kept_0123abcd_2.sql</code>") {
		t.Error("the page does not name the dump file")
	}
	data, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"dump": "/tmp/twice-kept-0/twice_kept_0123abcd_2.sql"`) {
		t.Error("report.json does not name the dump file")
	}
}

// A kept database whose dump failed, on a server that stopped with the
// test binary, is gone: the page and report.json say so and why.
func TestKeptDumpErrorShown(t *testing.T) {
	r := fixture(t)
	var f *report.Finding
	for ji := range r.Jobs {
		if fs := r.Jobs[ji].Findings; len(fs) > 0 && f == nil {
			f = &fs[0]
		}
	}
	if f == nil {
		t.Fatal("the fixture has no finding")
	}
	f.DumpError = "dumping database twice_kept_0123abcd_2 with pg_dump inside PostgreSQL container 0123456789ab (image pg:test) failed with exit code 1:\npg_dump: error: <connection lost>"
	html, err := r.HTML()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"could not be dumped, so it is gone:</p><pre>dumping database twice_kept_0123abcd_2 with pg_dump inside PostgreSQL container",
		"pg_dump: error: &lt;connection lost&gt;</pre>",
	} {
		if !strings.Contains(string(html), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	data, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"dump_error": "dumping database twice_kept_0123abcd_2 with pg_dump`) {
		t.Error("report.json does not say why the dump failed")
	}
}

// The culprit's call is marked in the diagram, on a red band in the SVG
// and in Mermaid: delivery 2's step 1 that added the points again, and
// the second email, not the clean first delivery's same calls.
func TestDiagramMarksCulprit(t *testing.T) {
	j := report.Job{Steps: []report.Step{{Text: "UPDATE customers SET points = points + 50"}, {Text: "email to=a@b", Effect: "email"}}}
	f := report.Finding{
		Order: []int{1, 1, 2, 2},
		Deliveries: []report.Delivery{
			{Label: "j1a1w1", Job: 1, Attempt: 1, Worker: 1, Fault: faults.KindCrash.String(), Steps: j.Steps},
			{Label: "j1a2w2", Job: 1, Attempt: 2, Worker: 2, Steps: j.Steps},
		},
		Effects: []report.Effect{{Kind: "email", Text: "email to=a@b", Delivery: "j1a1w1"}, {Kind: "email", Text: "email to=a@b", Delivery: "j1a2w2"}},
		Culprits: []report.Culprit{
			{Delivery: "j1a2w2", Step: 1, Op: "update", SQL: j.Steps[0].Text, Table: "customers", Row: "77"},
			{Delivery: "j1a2w2", Op: "extra", Effect: "email to=a@b"},
		},
	}
	d := report.BuildDiagram(j, f)
	var marked []string
	for _, e := range d.Events {
		if e.Culprit {
			marked = append(marked, e.From+">"+e.To+" "+e.Text)
		}
	}
	want := []string{"W2>DB 1. UPDATE customers SET points = points + 50", "W2>P4 2. email to=a@b"}
	if strings.Join(marked, "\n") != strings.Join(want, "\n") {
		t.Errorf("marked as culprits:\n%s\nwant:\n%s", strings.Join(marked, "\n"), strings.Join(want, "\n"))
	}
	if n := strings.Count(d.SVG("d"), `class="event culprit"`); n != 2 {
		t.Errorf("the SVG marks %d events as culprits, want 2", n)
	}
	if n := strings.Count(d.Mermaid(), "W2->>DB: culprit: 1. UPDATE"); n != 1 {
		t.Errorf("Mermaid marks the UPDATE %d times, want once:\n%s", n, d.Mermaid())
	}
}
