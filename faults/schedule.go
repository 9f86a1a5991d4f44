package faults

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Schedule is one execution plan: which deliveries run, which job ID each
// carries, where each dies or loses its reply, when each starts, how far
// the clock moves, and in which order overlapping deliveries' steps are
// granted. It is plain data so results carry it and reports print it;
// String and Parse convert it to and from its short text form.
type Schedule struct {
	// Fault names the fault the schedule came from; empty for a schedule
	// parsed from text.
	Fault Name
	// Deliveries, in the order they are started.
	Deliveries []Scheduled
	// Order lists, for deliveries that overlap, which delivery (1-based
	// index into Deliveries) is granted its next step, step by step.
	// Steps it does not cover are granted to the earliest delivery that
	// has one waiting.
	Order []int
	// Holds lists places in Order (1-based) whose grant holds its step's
	// commit: the step, a statement outside a transaction block
	// (autocommit), runs inside a transaction the harness opens around it,
	// and that transaction commits only once the next step granted, of
	// another delivery, has run or waits on a lock. The two statements
	// then both run on snapshots taken before either committed, the race
	// inside one statement (INSERT ... WHERE NOT EXISTS, a read-then-write
	// upsert) that whole statements in turn never show. The handler sees
	// its statement's reply only after the commit, as in autocommit. A
	// statement that cannot run in a transaction block (VACUUM, CREATE
	// INDEX CONCURRENTLY) or that begins or ends one itself is not held:
	// the delivery's outcome names it. The text form marks a held place
	// with "~": "order 1,2,1~,2".
	Holds []int
}

// Scheduled is one delivery as a schedule plans it: one invocation of the
// handler as a queue would make it, which job ID and attempt it carries,
// which worker runs it, when it starts and what goes wrong in it. Its
// label reads "j1a2w2" (String adds its start and fault). The handler,
// when the delivery runs, gets a harness.Delivery.
type Scheduled struct {
	// Job numbers the job ID the delivery carries: 1 is the original job,
	// 2 and up are producer copies (same arguments, new ID).
	Job int
	// Attempt is the queue's attempt counter for that job ID, from 1.
	Attempt int
	// Worker numbers the worker that runs the delivery. Deliveries with the
	// same number share one worker built by the job's factory, unless the
	// worker died in between.
	Worker int
	// Advance moves the harness clock forward just before the delivery
	// starts: a redelivery comes only after the visibility timeout.
	Advance time.Duration
	// With, when not zero, starts this delivery while delivery With
	// (1-based) still runs, once that one has completed After steps; zero
	// starts it after the previous delivery ended.
	With  int
	After int
	// Fault is what goes wrong in this delivery, if anything.
	Fault Kind
	// Late says the producer enqueues this copy of the job (Job 2 and up,
	// its first delivery) only now, just before the delivery starts and
	// after Advance, on the harness clock: after the original completed,
	// or past the queue's dedup window, where a producer that retries
	// later would. Without it every job is enqueued before the first
	// delivery. The text form writes it "late" before the label: "j1a1w1
	// > late j2a1w2".
	Late bool `json:",omitempty"`
	// At is the step KindCrash, KindAmbiguous, KindCrashAfterEffect,
	// KindEffectLostReply, KindEffectFailed, KindEffectOutage and
	// KindEffectSlow act on (1-based); for
	// KindCrash, zero means after the last step, before the ack.
	At int
}

// Kind is what goes wrong in one delivery.
type Kind int

// Kinds of fault a delivery can suffer.
const (
	// KindNone: the delivery runs to its end and is acked.
	KindNone Kind = iota
	// KindCrash: the worker dies just before step At reaches the server (its
	// open transaction rolls back, earlier commits stay), or, with At zero,
	// after its last step and before the ack. Its later statements and
	// effects are refused, its return value ignored, its worker discarded.
	KindCrash
	// KindAmbiguous: the server applies statement At (a COMMIT, or a
	// statement that commits on its own) but the reply never reaches the
	// delivery; its connection drops and its own error path runs. Step At
	// must be a statement: for an effect call see KindCrashAfterEffect.
	KindAmbiguous
	// KindLostAck: the delivery completes and returns nil, but the ack never
	// arrives; its worker lives on.
	KindLostAck
	// KindEffectLostReply: the provider makes effect call At, but its
	// answer never reaches the handler: the call returns a timeout error
	// and the delivery goes on, as after a read timeout or a connection
	// reset. The handler cannot tell whether the effect happened.
	KindEffectLostReply
	// KindEffectFailed: the provider refuses effect call At before making
	// it, with a transient error (a 503); the call returns it and the
	// delivery goes on. Nothing happened, and a retry may succeed.
	KindEffectFailed
	// KindCrashAfterEffect: the provider accepts effect call At and makes
	// the effect, and the worker dies before the answer reaches it. As
	// with KindCrash, its later statements and effects are refused, its
	// return value ignored, its worker discarded: the effect happened and
	// nothing the handler would have written after it did.
	KindCrashAfterEffect
	// KindEffectOutage: KindEffectLostReply for effect call At and for
	// every later call of the delivery with the same (non-empty)
	// idempotency key: the provider makes the call and every retry of it
	// answers from the key, and no answer reaches the client, as in an
	// outage longer than the client's own retries (stripe-go's, net/http's
	// replay of a request with an Idempotency-Key). The retries reach the
	// provider, so a retry with a new key makes the effect again; the
	// client's error reaches the handler. Without a key it is
	// KindEffectLostReply.
	KindEffectOutage
	// KindEffectSlow: the provider makes effect call At, but its answer
	// comes only after the client gave up waiting: an HTTP call returns
	// the error of the client's own timeout (net/http's "Client.Timeout
	// exceeded while awaiting headers", a net.Error whose Timeout is
	// true, matching context.DeadlineExceeded) at once, without waiting
	// the timeout out; any other effect call returns a timeout as under
	// KindEffectLostReply. The delivery goes on.
	KindEffectSlow
)

// kinds is every kind's text, as a schedule writes it, and whether it
// acts only on an effect call: String, OnEffect and Parse read it, so a
// kind is named in one place.
var kinds = [...]struct {
	text     string
	onEffect bool
}{
	KindNone:             {"", false},
	KindCrash:            {"crash", false},
	KindAmbiguous:        {"ambiguous", false},
	KindLostAck:          {"lostack", false},
	KindEffectLostReply:  {"lostreply", true},
	KindEffectFailed:     {"failed", true},
	KindCrashAfterEffect: {"crashafter", true},
	KindEffectOutage:     {"outage", true},
	KindEffectSlow:       {"slow", true},
}

// String names the kind as a schedule writes it: "crash", "ambiguous",
// "lostack", "lostreply", "failed", "crashafter", "outage", "slow", or ""
// for KindNone.
func (k Kind) String() string {
	if k < 0 || int(k) >= len(kinds) {
		return ""
	}
	return kinds[k].text
}

// OnEffect reports whether the kind acts only on an effect call:
// KindEffectLostReply, KindEffectFailed, KindCrashAfterEffect,
// KindEffectOutage and KindEffectSlow.
func (k Kind) OnEffect() bool {
	return k >= 0 && int(k) < len(kinds) && kinds[k].onEffect
}

// kindOf is the kind a schedule's text names, if any.
func kindOf(text string) (Kind, bool) {
	for k, kind := range kinds {
		if kind.text == text && text != "" {
			return Kind(k), true
		}
	}
	return KindNone, false
}

// String renders the delivery: job, attempt and worker ("j1a2w2"), then
// "@1:3" when it starts once delivery 1 has done 3 steps, then its fault
// ("!crash:3", "!crash", "!ambiguous:4", "!lostack", "!lostreply:2",
// "!failed:2", "!crashafter:2", "!outage:2", "!slow:2"); a clock move comes first ("+30s
// j1a2w2"), then "late " for a copy enqueued only as it starts ("+1h1s
// late j2a1w2").
func (d Scheduled) String() string {
	var b strings.Builder
	if d.Advance > 0 {
		fmt.Fprintf(&b, "+%s ", FormatDuration(d.Advance))
	}
	if d.Late {
		b.WriteString("late ")
	}
	fmt.Fprintf(&b, "j%da%dw%d", d.Job, d.Attempt, d.Worker)
	if d.With > 0 {
		fmt.Fprintf(&b, "@%d:%d", d.With, d.After)
	}
	switch d.Fault {
	case KindCrash:
		b.WriteString("!crash")
		if d.At != 0 {
			fmt.Fprintf(&b, ":%d", d.At)
		}
	case KindAmbiguous:
		fmt.Fprintf(&b, "!ambiguous:%d", d.At)
	case KindLostAck:
		b.WriteString("!lostack")
	case KindEffectLostReply, KindEffectFailed, KindCrashAfterEffect, KindEffectOutage, KindEffectSlow:
		fmt.Fprintf(&b, "!%s:%d", d.Fault, d.At)
	}
	return b.String()
}

// Label is the delivery without its start and fault: "j1a2w2".
func (d Scheduled) Label() string { return fmt.Sprintf("j%da%dw%d", d.Job, d.Attempt, d.Worker) }

// String renders the schedule in its short text form: deliveries in start
// order separated by " > ", then " order 1,2,1" when steps interleave,
// each held place marked "~" ("order 1,2~,1"). Parse reads it back.
func (s Schedule) String() string {
	parts := make([]string, len(s.Deliveries))
	for i, d := range s.Deliveries {
		parts[i] = d.String()
	}
	text := strings.Join(parts, " > ")
	if len(s.Order) > 0 {
		order := make([]string, len(s.Order))
		for i, o := range s.Order {
			order[i] = strconv.Itoa(o)
			if s.Held(i + 1) {
				order[i] += "~"
			}
		}
		text += " order " + strings.Join(order, ",")
	}
	return text
}

// Parse reads a schedule from the text form String writes, for example
// "j1a1w1!crash:3 > +30s j1a2w2", "j1a1w1!lostreply:2",
// "j1a1w1!crashafter:2 > +30s j1a2w2", "j1a1w1 > +1h1s late j2a1w2" or
// "j1a1w1 > j1a2w2@1:0 order 1,2,2,1".
func Parse(text string) (Schedule, error) {
	var s Schedule
	fail := func(format string, args ...any) (Schedule, error) {
		return Schedule{}, fmt.Errorf("schedule %q: %s", text, fmt.Sprintf(format, args...))
	}
	body := strings.TrimSpace(text)
	if body == "" {
		return fail(`empty; want deliveries like "j1a1w1 > j1a2w2"`)
	}
	if rest, order, ok := strings.Cut(body, " order "); ok {
		body = rest
		for _, f := range strings.Split(strings.TrimSpace(order), ",") {
			f = strings.TrimSpace(f)
			num, held := strings.CutSuffix(f, "~")
			n, err := strconv.Atoi(num)
			if err != nil || n < 1 {
				return fail("order: %q is not a delivery number from 1, held or not (2 or 2~)", f)
			}
			s.Order = append(s.Order, n)
			if held {
				s.Holds = append(s.Holds, len(s.Order))
			}
		}
	}
	for i, part := range strings.Split(body, ">") {
		d, err := parseDelivery(strings.TrimSpace(part))
		if err != nil {
			return fail("delivery %d: %v", i+1, err)
		}
		s.Deliveries = append(s.Deliveries, d)
	}
	if err := s.Validate(); err != nil {
		return Schedule{}, fmt.Errorf("schedule %q: %w", text, err)
	}
	return s, nil
}

// MarshalText writes the schedule's text form, so a schedule in a JSON
// record reads as it prints. Fault is not part of it.
func (s Schedule) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads what MarshalText wrote: the empty text is the zero
// Schedule (a warning about no schedule in particular holds one), which
// Parse, given a user's schedule, refuses.
func (s *Schedule) UnmarshalText(text []byte) error {
	if len(text) == 0 {
		*s = Schedule{}
		return nil
	}
	p, err := Parse(string(text))
	if err != nil {
		return err
	}
	*s = p
	return nil
}

// Validate reports the first inconsistency in s: a delivery overlapping
// one that starts after it, an order naming a delivery that does not
// exist.
func (s Schedule) Validate() error {
	if len(s.Deliveries) == 0 {
		return fmt.Errorf("no deliveries")
	}
	for i, d := range s.Deliveries {
		switch {
		case d.Job < 1 || d.Attempt < 1 || d.Worker < 1:
			return fmt.Errorf("delivery %d (%s): job, attempt and worker count from 1", i+1, d)
		case d.With < 0 || d.With > i || (d.With == 0 && d.After != 0):
			return fmt.Errorf("delivery %d (%s): can only overlap a delivery started before it (1 to %d)", i+1, d, i)
		case d.After < 0 || d.At < 0 || d.Advance < 0:
			return fmt.Errorf("delivery %d (%s): negative step or duration", i+1, d)
		case d.Fault == KindAmbiguous && d.At == 0:
			return fmt.Errorf("delivery %d (%s): an ambiguous commit needs its step", i+1, d)
		case d.Fault.OnEffect() && d.At == 0:
			return fmt.Errorf("delivery %d (%s): an effect fault needs the step of its effect call", i+1, d)
		case d.Fault < KindNone || d.Fault > KindEffectSlow:
			return fmt.Errorf("delivery %d: unknown fault kind %d", i+1, int(d.Fault))
		case d.Late && d.Job == 1:
			return fmt.Errorf("delivery %d (%s): only a producer's copy (job 2 and up) can be enqueued late; job 1 is the original, enqueued before any delivery", i+1, d)
		case d.Late && slices.ContainsFunc(s.Deliveries[:i], func(o Scheduled) bool { return o.Job == d.Job }):
			return fmt.Errorf("delivery %d (%s): job %d is enqueued by an earlier delivery of it already; only its first delivery can say late", i+1, d, d.Job)
		}
	}
	for _, o := range s.Order {
		if o > len(s.Deliveries) {
			return fmt.Errorf("order names delivery %d of %d", o, len(s.Deliveries))
		}
	}
	for i, h := range s.Holds {
		if h < 1 || h > len(s.Order) || (i > 0 && h <= s.Holds[i-1]) {
			return fmt.Errorf("held places must be places of the order (1 to %d), each once, in order; got %v", len(s.Order), s.Holds)
		}
	}
	return nil
}

// Held reports whether place i (1-based) of Order holds its step's
// commit.
func (s Schedule) Held(i int) bool { return slices.Contains(s.Holds, i) }

func parseDelivery(text string) (Scheduled, error) {
	var d Scheduled
	rest := text
	if strings.HasPrefix(rest, "+") {
		adv, after, ok := strings.Cut(rest[1:], " ")
		if !ok {
			return d, fmt.Errorf("%q: a clock move needs a delivery after it, like +30s j1a2w2", text)
		}
		dur, err := time.ParseDuration(adv)
		if err != nil || dur <= 0 {
			return d, fmt.Errorf("%q: %q is not a positive duration like 30s or 72h", text, adv)
		}
		d.Advance, rest = dur, strings.TrimSpace(after)
	}
	if after, ok := strings.CutPrefix(rest, "late "); ok {
		d.Late, rest = true, strings.TrimSpace(after)
	}
	if n := strings.Count(rest, "!"); n > 1 {
		_, faults, _ := strings.Cut(rest, "!")
		return d, fmt.Errorf("%q: a delivery has one fault, and this one has %d (!%s); give each fault a delivery of its own, like j1a1w1!crash:2 > +30s j1a2w2", text, n, strings.Join(strings.Split(faults, "!"), ", !"))
	}
	rest, fault, hasFault := strings.Cut(rest, "!")
	rest, start, hasStart := strings.Cut(rest, "@")
	var err error
	for _, field := range []struct {
		tag string
		dst *int
	}{{"j", &d.Job}, {"a", &d.Attempt}, {"w", &d.Worker}} {
		if !strings.HasPrefix(rest, field.tag) {
			return d, fmt.Errorf("%q: want %q next, like j1a2w2", text, field.tag)
		}
		if *field.dst, rest, err = leadingNumber(rest[len(field.tag):]); err != nil || *field.dst < 1 {
			return d, fmt.Errorf("%q: %q needs a number from 1, like j1a2w2", text, field.tag)
		}
	}
	if rest != "" {
		return d, fmt.Errorf("%q: unexpected %q after the worker", text, rest)
	}
	if hasStart {
		with, after, ok := strings.Cut(start, ":")
		if d.With, err = strconv.Atoi(with); !ok || err != nil || d.With < 1 {
			return d, fmt.Errorf("%q: want @delivery:steps, like @1:3", text)
		}
		if d.After, err = strconv.Atoi(after); err != nil || d.After < 0 {
			return d, fmt.Errorf("%q: want @delivery:steps, like @1:3", text)
		}
	}
	if hasFault {
		kind, at, hasAt := strings.Cut(fault, ":")
		var known bool
		if d.Fault, known = kindOf(kind); !known {
			return d, fmt.Errorf("%q: unknown fault %q; want crash, crash:N, ambiguous:N, lostack, lostreply:N, failed:N, crashafter:N, outage:N or slow:N", text, kind)
		}
		if hasAt {
			if d.Fault == KindLostAck {
				return d, fmt.Errorf("%q: lostack takes no step", text)
			}
			if d.At, err = strconv.Atoi(at); err != nil {
				return d, fmt.Errorf("%q: %q is not a step number; %s:N needs a step from 1, like %s:3", text, at, kind, kind)
			}
			if d.At < 1 {
				return d, fmt.Errorf("%q: %s needs a step from 1", text, kind)
			}
		}
	}
	return d, nil
}

func leadingNumber(s string) (int, string, error) {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	v, err := strconv.Atoi(s[:n])
	return v, s[n:], err
}

// FormatDuration writes d as a schedule's text form writes a clock move,
// the short way a reader would: whole hours as "72h", whole minutes as
// "90m", whole seconds (zero too) as "30s", and anything finer as
// time.Duration's String does ("1.5s", "250ms"). time.ParseDuration
// reads every one back. Reports print their durations with it, so a
// clock move reads the same in a schedule and beside it.
func FormatDuration(d time.Duration) string {
	switch {
	case d != 0 && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d != 0 && d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}
