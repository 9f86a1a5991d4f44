package assert

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/text"
)

// Effect is one call a handler made to a system outside the database (an
// email, a payment, an SMS), as the harness recorded it. It is plain data,
// so a Result holding effects can be written as JSON.
type Effect struct {
	// Kind names the kind of effect: "email", "payment", or a kind the
	// user chose ("sms"). Policies are per kind.
	Kind string
	// Key is the idempotency key the call carried, or empty. It is
	// printed but not compared: it is how a provider deduplicates, so
	// whether it worked shows in how many effects happened, and a key the
	// handler draws at random differs on every run.
	Key string
	// Payload is what the call asked for, as JSON: {"to": ..., "subject":
	// ...}. Effects with the same kind and payload are the same effect.
	Payload json.RawMessage
	// Result is what the provider answered, when it says something worth
	// keeping: a payment's ID.
	Result string
	// Err is the error the call returned, or empty. A call that returned
	// an error did not happen, as far as the harness can tell, and is not
	// compared.
	Err string
	// Replayed is true when the provider answered from its idempotency
	// store instead of doing the work again; such a call is not compared.
	Replayed bool
	// ReplyLost is true when the provider made the call but its answer
	// never reached the handler, whose call returned a timeout error
	// instead (an effect-lost-reply fault). The effect happened, and is
	// compared, whatever the handler believed.
	ReplyLost bool `json:",omitempty"`
	// Delivery is the delivery that made the call, "j1a2w2", with its job
	// ID and attempt. They say where an effect came from, in reports, and
	// are not compared.
	Delivery string
	JobID    string
	Attempt  int
	// At is the harness clock's time when the provider accepted the call.
	At time.Time
}

// Happened reports whether the effect took place: the call succeeded and
// was not answered from an idempotency store.
func (e Effect) Happened() bool { return e.Err == "" && !e.Replayed }

// String renders the effect without where it came from: its kind, key and
// payload fields in the payload's order, long values cut short.
//
//	payment key=payout-381 destination=acct_381 amount=5000 currency=eur
func (e Effect) String() string { return e.render(nil) }

// render is String leaving out the payload paths drop names.
func (e Effect) render(drop [][]string) string {
	var b strings.Builder
	b.WriteString(e.Kind)
	if e.Key != "" {
		k, _ := json.Marshal(e.Key)
		b.WriteString(" key=" + renderValue(string(k)))
	}
	fields, ok := objectFields(e.Payload)
	if !ok {
		if p := bytes.TrimSpace(e.Payload); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
			b.WriteString(" " + renderValue(string(p)))
		}
		return b.String()
	}
	for _, f := range fields {
		if slices.ContainsFunc(drop, func(p []string) bool { return len(p) == 1 && p[0] == f.name }) {
			continue
		}
		raw := f.raw
		if sub := pathsUnder(f.name, joined(drop)); len(sub) > 0 {
			raw = json.RawMessage(canonicalPayload(raw, sub))
		}
		b.WriteString(" " + f.name + "=" + renderValue(string(raw)))
	}
	return b.String()
}

// field is one member of a JSON object, in the order it was written.
type field struct {
	name string
	raw  json.RawMessage
}

// objectFields splits a JSON object into its members, keeping their order;
// ok is false when raw is not an object.
func objectFields(raw json.RawMessage) (fields []field, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		fields = append(fields, field{name: name, raw: v})
	}
	return fields, true
}

// maxValueRunes bounds how much of one payload value a line prints.
const maxValueRunes = 60

// renderValue prints a JSON value: a plain string bare, another string
// quoted, anything else as compact JSON; long values are cut short.
func renderValue(raw string) string {
	var s string
	if err := json.Unmarshal([]byte(raw), &s); err == nil {
		if utf8.RuneCountInString(s) > maxValueRunes {
			s = string([]rune(s)[:maxValueRunes]) + "…"
		}
		if s != "" && strings.IndexFunc(s, notBare) < 0 {
			return s
		}
		return strconv.Quote(s)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(raw)); err == nil {
		raw = buf.String()
	}
	if utf8.RuneCountInString(raw) > maxValueRunes {
		raw = string([]rune(raw)[:maxValueRunes]) + "…"
	}
	return raw
}

// notBare reports a rune that makes a string print quoted.
func notBare(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	}
	return !strings.ContainsRune("@._:/+-", r)
}

// Policy says how often an effect may happen in a scenario compared with
// one clean run. The zero value is ExactlyOnce.
type Policy int

// Policies.
const (
	// ExactlyOnce: the scenario makes the same effects as one clean run,
	// as many times each. The default, and what a payment needs.
	ExactlyOnce Policy = iota
	// AtLeastOnce: a missing effect is always a finding; a duplicate is
	// tolerated only where the scenario made it unavoidable
	// (EffectOptions.DuplicatesUnavoidable). The seed's receipts: a rare
	// duplicate beats a missing receipt.
	AtLeastOnce
	// AtMostOnce is the mirror: a duplicate is always a finding; a missing
	// effect is tolerated only where the scenario made it unavoidable
	// (EffectOptions.MissingUnavoidable).
	AtMostOnce
	// Repeatable is for an effect that is harmless to repeat at the
	// provider, where one call and several identical calls leave the same
	// state: cancelling a subscription, setting a flag, a PUT. Any number
	// of copies (one or more) of an effect the clean run made is fine; a
	// missing effect is always a finding, and so is an effect the clean
	// run did not make (a cancel with other parameters).
	Repeatable
	// AckRecorded is at-least-once for an effect whose only record is the
	// queue's ack (a digest mailed on a schedule, with nothing in the
	// database): a duplicate a redelivery of the same job made, one
	// delivery after another (a crash before the ack, a lost ack, a
	// redrive), is the window at-least-once allows and is tolerated
	// (EffectOptions.Redelivered); one a producer's copy or an
	// overlapping delivery made is a finding, as is a missing effect. A
	// queue that refuses copies (a task ID) keeps the record.
	AckRecorded
)

var policyNames = [...]string{ExactlyOnce: "exactly-once", AtLeastOnce: "at-least-once", AtMostOnce: "at-most-once", Repeatable: "repeatable", AckRecorded: "ack-recorded"}

func (p Policy) String() string {
	return text.Name(policyNames[:], p, "Policy")
}

// EffectOptions tune DiffEffects. The zero value holds every kind to
// exactly-once and compares every payload field.
type EffectOptions struct {
	// Label names the scenario in the diff header: "crash-mid-job" gives
	// `effects after crash-mid-job mismatch (-once +twice):`.
	Label string
	// Policies holds the policy of each kind of effect, by Effect.Kind;
	// kinds not in it are ExactlyOnce.
	Policies map[string]Policy
	// IgnoreFields are payload fields left out of the comparison:
	// "kind.field" for one kind, "field" for every kind, or a path inside
	// a field of one kind, "kind.field.key.sub" (array elements by
	// index), which leaves out that value and compares the rest.
	IgnoreFields []string
	// Volatile are the "kind.field"s and "kind.field.key" paths
	// VolatileEffects found; they are left out like IgnoreFields and
	// named under the diff.
	Volatile []string
	// DuplicatesUnavoidable says the scenario could make a duplicate that
	// no handler can prevent without deduplication on the other side:
	// deliveries overlapped, or a delivery died (a crash, a lost reply)
	// after an effect and before it finished. AtLeastOnce kinds then
	// tolerate duplicates. A clean run repeated (run twice, a producer
	// retry) never makes duplicates unavoidable.
	DuplicatesUnavoidable bool
	// MissingUnavoidable says the scenario could lose an effect that no
	// handler can guarantee: a delivery died after recording its intent
	// and before the effect. AtMostOnce kinds then tolerate a missing
	// effect.
	MissingUnavoidable bool
	// Redelivered says every delivery that made an effect in the scenario
	// was one job's, and no two of them overlapped: its duplicates are
	// redeliveries', after the last ack was lost or never sent.
	// AckRecorded kinds then tolerate duplicates.
	Redelivered bool
}

func (o EffectOptions) policy(kind string) Policy { return o.Policies[kind] }

// dropPaths returns the payload paths of kind that are left out.
func (o EffectOptions) dropPaths(kind string) [][]string {
	var out [][]string
	for _, lists := range [][]string{o.IgnoreFields, o.Volatile} {
		for _, f := range lists {
			if !strings.Contains(f, ".") {
				out = append(out, []string{f})
			}
		}
	}
	return append(out, pathsUnder(kind, o.IgnoreFields, o.Volatile)...)
}

// joined turns paths back into dotted names, for pathsUnder.
func joined(paths [][]string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = strings.Join(p, ".")
	}
	return out
}

// EffectDiff is how a scenario's effects differ from one clean run's, as
// judged by the policies. It is plain data.
type EffectDiff struct {
	Label string // EffectOptions.Label
	// Missing and Extra count the findings: effects of the clean run the
	// scenario lacks, and effects it made beyond the clean run's.
	Missing int
	Extra   int
	// Lines are the effects with a finding, grouped by effect, in the
	// order String prints them.
	Lines []EffectLine
	// Notes explain, one per kind, why a policy other than exactly-once
	// did not tolerate what happened.
	Notes []string
	// Volatile are the volatile payload fields left out of the comparison.
	Volatile []string
}

// EffectLine is one effect in an EffectDiff.
type EffectLine struct {
	// Op is "-" for an effect of the clean run the scenario lacks, "+" for
	// one the scenario made beyond the clean run's, " " for a copy both
	// made, shown for context.
	Op string
	// Effect is the effect, from the clean run's log for "-" and from the
	// scenario's otherwise. Text is how it prints, without its origin.
	Effect Effect
	Text   string
}

// maxShownEffects bounds how many lines one EffectDiff prints.
const maxShownEffects = 50

// String returns the diff under its header, each effect attributed to the
// delivery and attempt that made it:
//
//	effects after crash-mid-job mismatch (-once +twice):
//	  email to=asha@example.com subject="Your receipt" (j1a1w1, attempt 1)
//	+ email to=asha@example.com subject="Your receipt" (j1a2w2, attempt 2)
func (d *EffectDiff) String() string {
	if d == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("effects")
	if d.Label != "" {
		b.WriteString(" after " + d.Label)
	}
	b.WriteString(" mismatch (-once +twice):")
	for i, l := range d.Lines {
		if i == maxShownEffects {
			fmt.Fprintf(&b, "\n  ... and %d more %s", len(d.Lines)-i, text.Plural(len(d.Lines)-i, "line"))
			break
		}
		fmt.Fprintf(&b, "\n%s %s (%s, attempt %d)", l.Op, l.Text, l.Effect.Delivery, l.Effect.Attempt)
	}
	for _, n := range d.Notes {
		b.WriteString("\n" + n)
	}
	if len(d.Volatile) > 0 {
		b.WriteString("\nvolatile effect fields, left out: " + strings.Join(d.Volatile, ", "))
	}
	return b.String()
}

// effectGroup is one effect (kind and compared payload) with its copies on
// each side.
type effectGroup struct {
	kind, id    string
	once, twice []Effect
}

// DiffEffects compares the effects a scenario made (twice) with those of
// one clean run (once) and returns nil when every kind's policy is met.
//
// Only effects that happened count (Effect.Happened). Effects are the same
// when their kind and payload are, payload fields compared by value in any
// order; the key, result, origin and time are not compared. The copies of
// an effect compare as a multiset: how many the scenario made against how
// many the clean run made, judged by the kind's policy.
func DiffEffects(once, twice []Effect, opts EffectOptions) *EffectDiff {
	groups := map[string]*effectGroup{}
	group := func(e Effect) *effectGroup {
		id := e.Kind + "\x00" + canonicalPayload(e.Payload, opts.dropPaths(e.Kind))
		g := groups[id]
		if g == nil {
			g = &effectGroup{kind: e.Kind, id: id}
			groups[id] = g
		}
		return g
	}
	for _, e := range once {
		if e.Happened() {
			g := group(e)
			g.once = append(g.once, e)
		}
	}
	for _, e := range twice {
		if e.Happened() {
			g := group(e)
			g.twice = append(g.twice, e)
		}
	}
	ordered := make([]*effectGroup, 0, len(groups))
	for _, g := range groups {
		ordered = append(ordered, g)
	}
	slices.SortFunc(ordered, func(a, b *effectGroup) int {
		if c := strings.Compare(a.kind, b.kind); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})

	d := &EffectDiff{Label: opts.Label}
	noted := map[string]bool{}
	for _, g := range ordered {
		n1, n2 := len(g.once), len(g.twice)
		p := opts.policy(g.kind)
		tolerateExtra := (p == AtLeastOnce && opts.DuplicatesUnavoidable || p == AckRecorded && opts.Redelivered || p == Repeatable) && n1 > 0
		// A repeatable effect is there once it is there at all.
		tolerateMissing := p == AtMostOnce && opts.MissingUnavoidable || p == Repeatable && n2 > 0
		extra := n2 > n1 && !tolerateExtra
		missing := n2 < n1 && !tolerateMissing
		if !extra && !missing {
			continue
		}
		// Each line prints its own effect: copies in one group may differ
		// outside the payload (a random key per attempt).
		line := func(op string, e Effect) EffectLine {
			return EffectLine{Op: op, Effect: e, Text: e.render(opts.dropPaths(e.Kind))}
		}
		for _, e := range g.twice[:min(n1, n2)] {
			d.Lines = append(d.Lines, line(" ", e))
		}
		if extra {
			d.Extra += n2 - n1
			for _, e := range g.twice[n1:] {
				d.Lines = append(d.Lines, line("+", e))
			}
		}
		if missing {
			d.Missing += n1 - n2
			for _, e := range g.once[n2:] {
				d.Lines = append(d.Lines, line("-", e))
			}
		}
		if p != ExactlyOnce && !noted[g.kind] {
			noted[g.kind] = true
			d.Notes = append(d.Notes, policyNote(g.kind, p, opts))
		}
	}
	if len(d.Lines) == 0 {
		return nil
	}
	d.Volatile = opts.Volatile
	return d
}

// policyNote explains why kind's policy did not tolerate a difference.
func policyNote(kind string, p Policy, opts EffectOptions) string {
	switch p {
	case AtLeastOnce:
		s := kind + " is at-least-once: missing effects and effects the clean run did not make are always findings; a duplicate is tolerated only where deliveries overlapped or a delivery died between an effect and its record"
		if !opts.DuplicatesUnavoidable {
			s += ", and neither happened in this scenario"
		}
		return s
	case AckRecorded:
		s := kind + " is recorded by the queue's ack: missing effects and effects the clean run did not make are always findings; a duplicate is tolerated only from a redelivery of the same job that overlapped no other delivery"
		if !opts.Redelivered {
			s += ", and this one came from a producer's copy or an overlapping delivery"
		}
		return s
	case Repeatable:
		return kind + " is repeatable: any number of copies of an effect the clean run made is fine, but a missing effect and an effect the clean run did not make are findings"
	case AtMostOnce:
		s := kind + " is at-most-once: duplicates and effects the clean run did not make are always findings; a missing effect is tolerated only where a delivery died between recording its intent and the effect"
		if !opts.MissingUnavoidable {
			s += ", and none did in this scenario"
		}
		return s
	}
	return fmt.Sprintf("%s has the unknown policy %v and is held to exactly-once", kind, p)
}

// canonicalPayload is a payload's compared form: JSON with object members
// sorted and the dropped paths left out. A payload that is not valid JSON
// compares as its bytes.
func canonicalPayload(raw json.RawMessage, drop [][]string) string {
	v, ok := decodePayload(raw)
	if !ok {
		return "raw:" + string(raw)
	}
	out, err := json.Marshal(withoutPaths(v, drop))
	if err != nil {
		return "raw:" + string(raw)
	}
	return string(out)
}

// VolatileEffects returns the payload fields, as sorted "kind.field"s,
// whose values differ between the effects of two clean runs: a timestamp
// or a random ID in an email body. Pass them as EffectOptions.Volatile.
// Inside a field holding a JSON object or array, only the paths that
// differ are volatile, "kind.field.key.sub" (array elements by index), so
// the rest of it is still compared.
//
// Effects equal on both sides are paired first; the rest of each kind are
// paired in the order they happened. A kind that made a different number
// of effects in the two runs is not paired.
func VolatileEffects(run1, run2 []Effect) []string {
	byKind := func(es []Effect) map[string][]Effect {
		m := map[string][]Effect{}
		for _, e := range es {
			if e.Happened() {
				m[e.Kind] = append(m[e.Kind], e)
			}
		}
		return m
	}
	k1, k2 := byKind(run1), byKind(run2)
	seen := map[string]bool{}
	var out []string
	for kind, a := range k1 {
		b := k2[kind]
		if len(a) != len(b) {
			continue
		}
		// Pair equal effects first, so only the ones that differ are
		// paired by order.
		unmatched := map[string]int{}
		for _, e := range b {
			unmatched[canonicalPayload(e.Payload, nil)]++
		}
		var restA, restB []Effect
		for _, e := range a {
			if c := canonicalPayload(e.Payload, nil); unmatched[c] > 0 {
				unmatched[c]--
				continue
			}
			restA = append(restA, e)
		}
		for _, e := range b {
			if c := canonicalPayload(e.Payload, nil); unmatched[c] > 0 {
				unmatched[c]--
				restB = append(restB, e)
			}
		}
		var paths [][]string
		for i := range restA {
			paths = append(paths, differingFields(restA[i].Payload, restB[i].Payload)...)
		}
		for _, p := range outermost(paths) {
			if name := kind + "." + strings.Join(p, "."); !seen[name] {
				seen[name] = true
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// differingFields returns the paths, a top-level member first, at which
// two JSON objects differ, including members only one has; nil when
// either is not an object.
func differingFields(a, b json.RawMessage) [][]string {
	va, okA := decodePayload(a)
	vb, okB := decodePayload(b)
	ma, okA2 := va.(map[string]any)
	mb, okB2 := vb.(map[string]any)
	if !okA || !okB || !okA2 || !okB2 {
		return nil
	}
	return differingPaths(ma, mb)
}

// decodePayload decodes JSON with numbers kept exact.
func decodePayload(raw json.RawMessage) (any, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	return v, true
}

// EffectsDiffer is the finding that a scenario's effects break a policy:
// CheckEffects's error. Its message starts "[twice] not idempotent: ".
type EffectsDiffer struct {
	// Diff is how the effects break their policies.
	Diff *EffectDiff
}

// Error is the finding with its diff, as EffectsEqual reports it.
func (e *EffectsDiffer) Error() string {
	if e.Diff == nil {
		return blame.Line("not idempotent: the effects differ from one clean run")
	}
	var b strings.Builder
	b.WriteString(blame.Line("not idempotent: the effects"))
	if e.Diff.Label != "" {
		b.WriteString(" after " + e.Diff.Label)
	}
	b.WriteString(" differ from one clean run:")
	var parts []string
	if e.Diff.Missing > 0 {
		parts = append(parts, fmt.Sprintf("%d missing", e.Diff.Missing))
	}
	if e.Diff.Extra > 0 {
		parts = append(parts, fmt.Sprintf("%d extra", e.Diff.Extra))
	}
	b.WriteString(" " + strings.Join(parts, ", ") + "\n")
	b.WriteString(e.Diff.String())
	return b.String()
}

// CheckEffects compares the effects of a scenario (twice) with those of
// one clean run (once). It returns nil when every policy is met, an
// *EffectsDiffer when one is not, and an error naming the misuse when
// opts.Policies holds a value that is not a Policy.
func CheckEffects(once, twice []Effect, opts EffectOptions) error {
	kinds := make([]string, 0, len(opts.Policies))
	for k := range opts.Policies {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		if p := opts.Policies[k]; p < ExactlyOnce || p > AckRecorded {
			return blame.Userf("EffectOptions.Policies[%q] is %v; use assert.ExactlyOnce, assert.AtLeastOnce, assert.AtMostOnce, assert.Repeatable or assert.AckRecorded", k, p)
		}
	}
	if d := DiffEffects(once, twice, opts); d != nil {
		return &EffectsDiffer{Diff: d}
	}
	return nil
}

// EffectsEqual reports, as one t.Errorf, every effect that breaks its
// kind's policy, and returns whether there was none.
func EffectsEqual(t TestingT, once, twice []Effect, opts EffectOptions) bool {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	if err := CheckEffects(once, twice, opts); err != nil {
		t.Errorf("%s", failure(err))
		return false
	}
	return true
}
