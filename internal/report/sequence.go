package report

import (
	"fmt"
	"strings"

	"github.com/runtwice/twice/harness/result"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/internal/text"
)

// Diagram is a finding's schedule as a sequence diagram: the queue, the
// workers, the database and the effect providers, and what passed between
// them in the order it happened. SVG and Mermaid render it.
type Diagram struct {
	Participants []Participant
	Events       []Event
}

// Participant is one lifeline.
type Participant struct {
	ID   string // Q, W1, DB, P1: safe in Mermaid
	Name string // Queue, Worker 1, Database, Email provider
}

// EventKind says how an event is drawn.
type EventKind int

// Kinds of event.
const (
	// Call is a message that arrives: a solid arrow.
	Call EventKind = iota
	// Reply is an answer: a dashed arrow.
	Reply
	// Lost is a message that never arrives: an arrow ending in a cross.
	Lost
	// Crash is a worker dying: a cross on its lifeline.
	Crash
	// Note is a remark over one lifeline: a clock move, or a worker
	// living on after a call timed out.
	Note
)

// Event is one row of the diagram.
type Event struct {
	Kind     EventKind
	From, To string // participant IDs; To is empty for Crash and Note
	Text     string
	// Culprit marks the call a culprit of the finding made: the statement
	// that wrote a row that differs, or the effect made beyond the clean
	// run's (Finding.Culprits).
	Culprit bool
}

// BuildDiagram draws finding f of job j. The steps of each delivery come
// from the interleaving the harness recorded (Finding.Order) and are
// labelled with the steps the delivery was granted, each with the fate
// the harness recorded (Delivery.Steps): the diagram draws what happened
// and works nothing out from the schedule. Effects are the scenario's
// own.
func BuildDiagram(j Job, f Finding) Diagram {
	b := &diagramBuilder{job: j, f: f, ids: map[string]string{}, effects: map[string][]Effect{}}
	b.participant("Q", "Queue")
	for _, d := range f.Deliveries {
		b.participant(fmt.Sprintf("W%d", d.Worker), fmt.Sprintf("Worker %d", d.Worker))
	}
	b.participant("DB", "Database")
	for _, e := range f.Effects {
		b.provider(e.Kind)
		b.effects[e.Delivery] = append(b.effects[e.Delivery], e)
	}
	for _, s := range j.Steps {
		if s.Effect != "" {
			b.provider(s.Effect)
		}
	}
	b.walk()
	return Diagram{Participants: b.parts, Events: b.events}
}

type diagramBuilder struct {
	job     Job
	f       Finding
	parts   []Participant
	ids     map[string]string // participant name -> ID
	events  []Event
	effects map[string][]Effect // by delivery label, in order, consumed as drawn
}

func (b *diagramBuilder) participant(id, name string) string {
	if got, ok := b.ids[name]; ok {
		return got
	}
	b.ids[name] = id
	b.parts = append(b.parts, Participant{ID: id, Name: name})
	return id
}

func (b *diagramBuilder) provider(kind string) string {
	name := providerName(kind)
	if id, ok := b.ids[name]; ok {
		return id
	}
	return b.participant(fmt.Sprintf("P%d", len(b.parts)), name)
}

func providerName(kind string) string {
	if kind == "" {
		return "Provider"
	}
	return strings.ToUpper(kind[:1]) + kind[1:] + " provider"
}

func (b *diagramBuilder) add(kind EventKind, from, to, text string) {
	b.events = append(b.events, Event{Kind: kind, From: from, To: to, Text: text})
}

// culprit marks the last event added, a call, when one of the finding's
// culprits made it: delivery del's step k, or for an effect culprit with
// no step the call whose text it names.
func (b *diagramBuilder) culprit(del string, k int, effect string) {
	for _, c := range b.f.Culprits {
		if c.Delivery != del {
			continue
		}
		if c.Step == k || (c.Step == 0 && c.Effect != "" && c.Effect == effect) {
			b.events[len(b.events)-1].Culprit = true
			return
		}
	}
}

func (b *diagramBuilder) worker(d int) string {
	return fmt.Sprintf("W%d", b.f.Deliveries[d].Worker)
}

func (b *diagramBuilder) walk() {
	n := len(b.f.Deliveries)
	last := make([]int, n) // index in Order of each delivery's last step, -1 if none
	for i := range last {
		last[i] = -1
	}
	for i, o := range b.f.Order {
		if o >= 1 && o <= n {
			last[o-1] = i
		}
	}
	started := make([]bool, n)
	taken := make([]int, n)
	var start func(d int)
	// due starts the deliveries the schedule starts once d has taken its
	// steps so far: where it started them, not at their first step, so a
	// step d took meanwhile (a held commit) is drawn after them and the
	// count they name is what the diagram drew above.
	due := func(d int) {
		for e := d + 1; e < n; e++ {
			if w := b.f.Deliveries[e]; !started[e] && w.With == d+1 && w.After == taken[d] {
				start(e)
			}
		}
	}
	start = func(d int) {
		// Deliveries before d that took no step started and ended first.
		for e := 0; e < d; e++ {
			if !started[e] && last[e] < 0 {
				started[e] = true
				b.start(e, taken)
				b.end(e)
			}
		}
		started[d] = true
		b.start(d, taken)
		due(d)
	}
	for i, o := range b.f.Order {
		d := o - 1
		if d < 0 || d >= n {
			continue
		}
		if !started[d] {
			start(d)
		}
		taken[d]++
		b.step(d, taken[d])
		due(d) // before d's end: they start while it runs
		if last[d] == i {
			b.end(d)
		}
	}
	for d := range n {
		if !started[d] {
			start(d)
			b.end(d)
		}
	}
}

// start draws delivery d's delivery; taken counts the steps drawn so far
// of each delivery.
func (b *diagramBuilder) start(d int, taken []int) {
	del := b.f.Deliveries[d]
	if del.Advance > 0 {
		b.add(Note, "Q", "", "clock +"+shortDuration(del.Advance))
	}
	if del.Late {
		b.add(Note, "Q", "", fmt.Sprintf("the producer enqueues job %d only now", del.Job))
	}
	if del.Waited > 0 {
		b.add(Note, "Q", "", "clock +"+shortDuration(del.Waited)+": the job is due")
	}
	var line string
	switch {
	case del.QueueRetry:
		line = fmt.Sprintf("retry job %d, attempt %d", del.Job, del.Attempt)
	case del.Job > 1:
		line = fmt.Sprintf("deliver job %d (a producer copy), attempt %d", del.Job, del.Attempt)
	default:
		line = fmt.Sprintf("deliver job %d, attempt %d", del.Job, del.Attempt)
	}
	if del.With > 0 {
		// The steps drawn, which are the schedule's After unless the
		// other delivery ended short of them.
		k := taken[del.With-1]
		line += fmt.Sprintf(", while %s has taken %d %s", b.f.Deliveries[del.With-1].Label, k, text.Plural(k, "step"))
	}
	b.add(Call, "Q", b.worker(d), line)
}

func (b *diagramBuilder) step(d, k int) {
	del := b.f.Deliveries[d]
	w := b.worker(d)
	step := Step{Text: fmt.Sprintf("step %d", k)}
	if k <= len(del.Steps) {
		step = del.Steps[k-1] // what this delivery really ran
	}
	label := step.Text
	if step.Fate == result.CrashedBefore {
		b.add(Crash, w, "", fmt.Sprintf("dies before step %d: %s", k, text.OneLine(label)))
		return
	}
	if step.Effect != "" {
		kind, call := step.Effect, label
		var got *Effect
		if q := b.effects[del.Label]; len(q) > 0 {
			got, b.effects[del.Label] = &q[0], q[1:]
			kind, call = got.Kind, got.Text
		}
		p := b.provider(kind)
		b.add(Call, w, p, fmt.Sprintf("%d. %s", k, call))
		b.culprit(del.Label, k, call)
		switch {
		case step.Fate == result.CrashedAfter:
			b.add(Lost, p, w, "done, but the answer is lost")
			b.add(Crash, w, "", fmt.Sprintf("dies before it hears back from step %d", k))
		case step.Fate == result.TimedOut || (got != nil && got.ReplyLost):
			// The provider's side: it made the effect. The handler's side:
			// an error, and it lives on.
			done := "done"
			if got != nil && got.Result != "" {
				done += ": " + got.Result
			}
			b.add(Lost, p, w, done+", but the answer is lost")
			b.add(Note, w, "", "timeout error; goes on")
		case step.Fate == result.Refused:
			b.add(Reply, p, w, "503, refused: not done")
		case got == nil:
		case got.Err != "":
			b.add(Reply, p, w, "error: "+text.OneLine(got.Err))
		case got.Replayed:
			b.add(Reply, p, w, "stored answer, not done again")
		case got.Result != "":
			b.add(Reply, p, w, "done: "+got.Result)
		default:
			b.add(Reply, p, w, "done")
		}
		return
	}
	b.add(Call, w, "DB", fmt.Sprintf("%d. %s", k, text.OneLine(label)))
	b.culprit(del.Label, k, "")
	switch step.Fate {
	case result.CommitHeld:
		b.add(Note, w, "", fmt.Sprintf("commit held: step %d has run, and commits once the other delivery's next step has run or waits for it", k))
	case result.WaitedOnLock:
		b.add(Note, w, "", fmt.Sprintf("step %d waits on a lock the other delivery holds", k))
	case result.ReplyLost:
		b.add(Lost, "DB", w, fmt.Sprintf("step %d applied, but the reply is lost", k))
	case result.Unfinished:
		b.add(Note, w, "", fmt.Sprintf("step %d has not finished when the delivery ends", k))
	}
}

// diedAtStep reports whether delivery del died at one of its steps: before
// it, or right after an effect whose answer it never heard. The diagram
// drew its death there.
func diedAtStep(del Delivery) bool {
	for _, s := range del.Steps {
		if s.Fate == result.CrashedBefore || s.Fate == result.CrashedAfter {
			return true
		}
	}
	return false
}

func (b *diagramBuilder) end(d int) {
	del := b.f.Deliveries[d]
	w := b.worker(d)
	// Effects the walk could not place (the delivery took another path
	// than the clean run) are drawn before the delivery ends.
	for _, e := range b.effects[del.Label] {
		p := b.provider(e.Kind)
		b.add(Call, w, p, e.Text)
	}
	b.effects[del.Label] = nil
	switch {
	case diedAtStep(del):
	case del.AckLost:
		b.add(Lost, w, "Q", "ack, lost on the way")
	case del.Err != "":
		b.add(Call, w, "Q", "fails: "+text.OneLine(del.Err))
	case del.Died:
		b.add(Crash, w, "", "dies after its last step, before the ack")
	default:
		b.add(Call, w, "Q", "ack")
	}
}

// shortDuration writes m as a schedule writes a clock move.
func shortDuration(m Millis) string { return faults.FormatDuration(m.Duration()) }
