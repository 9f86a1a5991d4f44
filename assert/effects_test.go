package assert_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/internal/blame"
)

var effectsStart = time.Date(2026, 10, 12, 9, 0, 0, 0, time.UTC)

// effect builds a log entry: the delivery label carries job, attempt and
// worker as the harness writes them ("j1a2w2").
func effect(kind, key, payload, delivery string) assert.Effect {
	var job, attempt, worker int
	if _, err := fmt.Sscanf(delivery, "j%da%dw%d", &job, &attempt, &worker); err != nil {
		panic(err)
	}
	return assert.Effect{
		Kind: kind, Key: key, Payload: json.RawMessage(payload),
		Delivery: delivery, JobID: fmt.Sprintf("twice-job-%d", job), Attempt: attempt,
		At: effectsStart.Add(time.Duration(attempt) * time.Second),
	}
}

const (
	receiptAsha = `{"to":"asha@example.com","subject":"Your receipt","body":"Order 9812: 50 points"}`
	receiptBen  = `{"to":"ben@example.com","subject":"Your receipt","body":"Order 9813: 20 points"}`
	payout381   = `{"destination":"acct_381","amount":48250,"currency":"eur"}`
	apology     = `{"to":"asha@example.com","subject":"We could not credit your points","body":"Sorry"}`
)

func replayed(e assert.Effect) assert.Effect { e.Replayed = true; return e }
func failed(e assert.Effect, err string) assert.Effect {
	e.Err = err
	return e
}

func TestDiffEffects(t *testing.T) {
	atLeastOnce := map[string]assert.Policy{"email": assert.AtLeastOnce}
	atMostOnce := map[string]assert.Policy{"email": assert.AtMostOnce}
	repeatable := map[string]assert.Policy{"cancel": assert.Repeatable}
	cancel := `{"subscription":"sub_77"}`
	key := "payout-restaurant-381-2026-W42"
	tests := []struct {
		name    string
		once    []assert.Effect
		twice   []assert.Effect
		opts    assert.EffectOptions
		finding bool // its text is in testdata/effects_<name>.golden
	}{
		{
			name:  "same effects",
			once:  []assert.Effect{effect("email", "", receiptAsha, "j1a1w1")},
			twice: []assert.Effect{effect("email", "", receiptAsha, "j1a1w1")},
		},
		{
			name:    "exactly once duplicate",
			once:    []assert.Effect{effect("email", "", receiptAsha, "j1a1w1")},
			twice:   []assert.Effect{effect("email", "", receiptAsha, "j1a1w1"), effect("email", "", receiptAsha, "j1a2w2")},
			opts:    assert.EffectOptions{Label: "run-twice"},
			finding: true,
		},
		{
			name:    "exactly once duplicate even where unavoidable",
			once:    []assert.Effect{effect("payment", key, payout381, "j1a1w1")},
			twice:   []assert.Effect{effect("payment", key, payout381, "j1a1w1"), effect("payment", key, payout381, "j1a2w2")},
			opts:    assert.EffectOptions{Label: "redrive", DuplicatesUnavoidable: true, MissingUnavoidable: true},
			finding: true,
		},
		{
			name:  "at least once duplicate where unavoidable",
			once:  []assert.Effect{effect("email", "", receiptAsha, "j1a1w1")},
			twice: []assert.Effect{effect("email", "", receiptAsha, "j1a1w1"), effect("email", "", receiptAsha, "j1a2w2")},
			opts:  assert.EffectOptions{Label: "crash-after-effect", Policies: atLeastOnce, DuplicatesUnavoidable: true},
		},
		{
			name:    "at least once duplicate after a clean run",
			once:    []assert.Effect{effect("email", "", receiptAsha, "j1a1w1")},
			twice:   []assert.Effect{effect("email", "", receiptAsha, "j1a1w1"), effect("email", "", receiptAsha, "j1a2w2")},
			opts:    assert.EffectOptions{Label: "run-twice", Policies: atLeastOnce},
			finding: true,
		},
		{
			name:    "at least once missing",
			once:    []assert.Effect{effect("email", "", receiptAsha, "j1a1w1")},
			opts:    assert.EffectOptions{Label: "crash-mid-job", Policies: atLeastOnce, DuplicatesUnavoidable: true, MissingUnavoidable: true},
			finding: true,
		},
		{
			name:    "at least once effect the clean run did not make",
			once:    []assert.Effect{effect("email", "", receiptAsha, "j1a1w1")},
			twice:   []assert.Effect{effect("email", "", receiptAsha, "j1a1w1"), effect("email", "", apology, "j1a1w1")},
			opts:    assert.EffectOptions{Label: "ambiguous-commit", Policies: atLeastOnce, DuplicatesUnavoidable: true},
			finding: true,
		},
		{
			name: "at most once missing where unavoidable",
			once: []assert.Effect{effect("email", "", receiptAsha, "j1a1w1")},
			opts: assert.EffectOptions{Label: "crash-mid-job", Policies: atMostOnce, MissingUnavoidable: true},
		},
		{
			name:    "at most once missing after a clean run",
			once:    []assert.Effect{effect("email", "", receiptAsha, "j1a1w1")},
			opts:    assert.EffectOptions{Label: "run-twice", Policies: atMostOnce},
			finding: true,
		},
		{
			name:    "at most once duplicate",
			once:    []assert.Effect{effect("email", "", receiptAsha, "j1a1w1")},
			twice:   []assert.Effect{effect("email", "", receiptAsha, "j1a1w1"), effect("email", "", receiptAsha, "j1a2w2")},
			opts:    assert.EffectOptions{Label: "crash-after-effect", Policies: atMostOnce, DuplicatesUnavoidable: true, MissingUnavoidable: true},
			finding: true,
		},
		{
			name:  "repeatable duplicate after a clean run",
			once:  []assert.Effect{effect("cancel", "", cancel, "j1a1w1")},
			twice: []assert.Effect{effect("cancel", "", cancel, "j1a1w1"), effect("cancel", "", cancel, "j1a2w2")},
			opts:  assert.EffectOptions{Label: "run-twice", Policies: repeatable},
		},
		{
			name: "repeatable many copies of each of several effects",
			once: []assert.Effect{effect("cancel", "", cancel, "j1a1w1"), effect("cancel", "", `{"subscription":"sub_78"}`, "j1a1w1")},
			twice: []assert.Effect{
				effect("cancel", "", `{"subscription":"sub_78"}`, "j1a1w1"), effect("cancel", "", cancel, "j1a1w1"),
				effect("cancel", "", cancel, "j1a2w2"), effect("cancel", "", cancel, "j1a3w3"),
			},
			opts: assert.EffectOptions{Label: "lost-ack", Policies: repeatable},
		},
		{
			name:  "repeatable one copy where the clean run made two",
			once:  []assert.Effect{effect("cancel", "", cancel, "j1a1w1"), effect("cancel", "", cancel, "j1a1w1")},
			twice: []assert.Effect{effect("cancel", "", cancel, "j1a2w2")},
			opts:  assert.EffectOptions{Label: "crash-mid-job", Policies: repeatable},
		},
		{
			name:    "repeatable missing",
			once:    []assert.Effect{effect("cancel", "", cancel, "j1a1w1")},
			twice:   []assert.Effect{failed(effect("cancel", "", cancel, "j1a2w2"), "503")},
			opts:    assert.EffectOptions{Label: "crash-mid-job", Policies: repeatable, DuplicatesUnavoidable: true, MissingUnavoidable: true},
			finding: true,
		},
		{
			name:    "repeatable effect the clean run did not make",
			once:    []assert.Effect{effect("cancel", "", cancel, "j1a1w1")},
			twice:   []assert.Effect{effect("cancel", "", cancel, "j1a1w1"), effect("cancel", "", `{"subscription":"sub_78"}`, "j1a2w2")},
			opts:    assert.EffectOptions{Label: "run-twice", Policies: repeatable},
			finding: true,
		},
		{
			name:    "repeatable only for its kind",
			once:    []assert.Effect{effect("cancel", "", cancel, "j1a1w1"), effect("email", "", receiptAsha, "j1a1w1")},
			twice:   []assert.Effect{effect("cancel", "", cancel, "j1a1w1"), effect("email", "", receiptAsha, "j1a1w1"), effect("cancel", "", cancel, "j1a2w2"), effect("email", "", receiptAsha, "j1a2w2")},
			opts:    assert.EffectOptions{Label: "run-twice", Policies: repeatable},
			finding: true,
		},
		{
			name: "origin, time, key and result are not compared",
			once: []assert.Effect{effect("payment", "payout-7f3a", payout381, "j1a1w1"), effect("email", "", receiptAsha, "j1a1w1")},
			twice: []assert.Effect{effect("email", "", receiptAsha, "j2a1w2"), func() assert.Effect {
				e := effect("payment", "payout-91cc", payout381, "j1a3w3")
				e.Result = "py_9"
				return e
			}()},
		},
		{
			name: "replayed and failed calls are not compared",
			once: []assert.Effect{effect("payment", key, payout381, "j1a1w1")},
			twice: []assert.Effect{
				effect("payment", key, payout381, "j1a1w1"),
				replayed(effect("payment", key, payout381, "j1a2w2")),
				failed(effect("email", "", apology, "j1a2w2"), "smtp: 421 try again later"),
			},
		},
		{
			name:  "payload member order and spacing do not matter",
			once:  []assert.Effect{effect("email", "", receiptAsha, "j1a1w1")},
			twice: []assert.Effect{effect("email", "", `{ "body": "Order 9812: 50 points", "subject": "Your receipt", "to": "asha@example.com" }`, "j1a1w1")},
		},
		{
			name:  "volatile field left out",
			once:  []assert.Effect{effect("email", "", `{"to":"asha@example.com","sent":"09:00:01"}`, "j1a1w1")},
			twice: []assert.Effect{effect("email", "", `{"to":"asha@example.com","sent":"09:00:07"}`, "j1a1w1")},
			opts:  assert.EffectOptions{Volatile: []string{"email.sent"}},
		},
		{
			name:  "ignored field left out for every kind",
			once:  []assert.Effect{effect("sms", "", `{"to":"+31","trace":"a1"}`, "j1a1w1")},
			twice: []assert.Effect{effect("sms", "", `{"to":"+31","trace":"b2"}`, "j1a1w1")},
			opts:  assert.EffectOptions{IgnoreFields: []string{"trace"}},
		},
		{
			name:    "volatile field named under a finding",
			once:    []assert.Effect{effect("email", "", `{"to":"asha@example.com","sent":"09:00:01"}`, "j1a1w1")},
			twice:   []assert.Effect{effect("email", "", `{"to":"asha@example.com","sent":"09:00:07"}`, "j1a1w1"), effect("email", "", `{"to":"asha@example.com","sent":"09:00:09"}`, "j1a2w2")},
			opts:    assert.EffectOptions{Label: "run-twice", Volatile: []string{"email.sent"}},
			finding: true,
		},
		{
			name: "several kinds",
			once: []assert.Effect{
				effect("payment", key, payout381, "j1a1w1"),
				effect("email", "", receiptAsha, "j1a1w1"),
				effect("email", "", receiptBen, "j1a1w1"),
			},
			twice: []assert.Effect{
				effect("payment", key, payout381, "j1a1w1"),
				effect("email", "", receiptBen, "j1a1w1"),
				effect("payment", key, payout381, "j1a2w2"),
				effect("sms", "", `"Order 9812 has shipped"`, "j1a2w2"),
			},
			opts:    assert.EffectOptions{Label: "redrive", Policies: atLeastOnce, DuplicatesUnavoidable: true},
			finding: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := assert.DiffEffects(tt.once, tt.twice, tt.opts)
			if !tt.finding {
				require.Nil(t, d, "unexpected finding:\n%s", d)
				return
			}
			require.NotNil(t, d, "no finding")
			goldenText(t, "effects_"+strings.ReplaceAll(tt.name, " ", "_"), d.String()+"\n")
		})
	}
}

func TestDiffEffectsCounts(t *testing.T) {
	once := []assert.Effect{effect("email", "", receiptAsha, "j1a1w1"), effect("email", "", receiptBen, "j1a1w1")}
	twice := []assert.Effect{
		effect("email", "", receiptAsha, "j1a1w1"),
		effect("email", "", receiptAsha, "j1a2w2"),
		effect("email", "", receiptAsha, "j1a3w3"),
	}
	d := assert.DiffEffects(once, twice, assert.EffectOptions{})
	require.NotNil(t, d)
	require.Equal(t, 1, d.Missing)
	require.Equal(t, 2, d.Extra)
	var ops, from []string
	for _, l := range d.Lines {
		ops = append(ops, l.Op)
		from = append(from, l.Effect.Delivery)
	}
	require.Equal(t, []string{" ", "+", "+", "-"}, ops)
	require.Equal(t, []string{"j1a1w1", "j1a2w2", "j1a3w3", "j1a1w1"}, from, "the first copies match the clean run; the later ones are extra")
}

// A loop that sends the same email over and over prints only the start.
func TestDiffEffectsTruncated(t *testing.T) {
	once := []assert.Effect{effect("email", "", receiptAsha, "j1a1w1")}
	var twice []assert.Effect
	for range 75 {
		twice = append(twice, effect("email", "", receiptAsha, "j1a1w1"))
	}
	d := assert.DiffEffects(once, twice, assert.EffectOptions{Label: "run-twice"})
	require.NotNil(t, d)
	require.Equal(t, 74, d.Extra)
	goldenText(t, "effects_truncated", d.String()+"\n")
}

func TestEffectString(t *testing.T) {
	tests := []struct {
		name string
		e    assert.Effect
		want string
	}{
		{"object in its own order", effect("payment", "payout-381", payout381, "j1a1w1"), `payment key=payout-381 destination=acct_381 amount=48250 currency=eur`},
		{"strings with spaces are quoted", effect("email", "", receiptAsha, "j1a1w1"), `email to=asha@example.com subject="Your receipt" body="Order 9812: 50 points"`},
		{"key with a space", effect("payment", "payout 381", `{}`, "j1a1w1"), `payment key="payout 381"`},
		{"empty string", effect("email", "", `{"to":""}`, "j1a1w1"), `email to=""`},
		{"long value cut short", effect("email", "", `{"body":"`+strings.Repeat("é", 70)+`"}`, "j1a1w1"), `email body="` + strings.Repeat("é", 60) + `…"`},
		{"nested values as compact JSON", effect("webhook", "", `{"items": [1, 2], "meta": {"a": null}}`, "j1a1w1"), `webhook items=[1,2] meta={"a":null}`},
		{"a plain string payload", effect("sms", "", `"Order 9812 has shipped"`, "j1a1w1"), `sms "Order 9812 has shipped"`},
		{"a number payload", effect("counter", "", `42`, "j1a1w1"), `counter 42`},
		{"no payload", effect("push", "", ``, "j1a1w1"), `push`},
		{"null payload", effect("push", "", `null`, "j1a1w1"), `push`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, tt.e.String())
		})
	}
}

func TestVolatileEffects(t *testing.T) {
	tests := []struct {
		name       string
		run1, run2 []assert.Effect
		want       []string
	}{
		{
			name: "equal runs",
			run1: []assert.Effect{effect("email", "", receiptAsha, "j1a1w1")},
			run2: []assert.Effect{effect("email", "", receiptAsha, "j1a1w1")},
		},
		{
			name: "a timestamp in the body",
			run1: []assert.Effect{effect("email", "", `{"to":"a@x","sent":"09:00:01"}`, "j1a1w1")},
			run2: []assert.Effect{effect("email", "", `{"to":"a@x","sent":"09:00:07"}`, "j1a1w1")},
			want: []string{"email.sent"},
		},
		{
			name: "equal effects in another order are paired first",
			run1: []assert.Effect{
				effect("email", "", receiptAsha, "j1a1w1"),
				effect("email", "", receiptBen, "j1a1w1"),
				effect("sms", "", `{"to":"+31","id":"a"}`, "j1a1w1"),
			},
			run2: []assert.Effect{
				effect("email", "", receiptBen, "j1a1w1"),
				effect("email", "", receiptAsha, "j1a1w1"),
				effect("sms", "", `{"to":"+31","id":"b","extra":1}`, "j1a1w1"),
			},
			want: []string{"sms.extra", "sms.id"},
		},
		{
			name: "only the paths that differ inside a nested field",
			run1: []assert.Effect{effect("webhook", "", `{"to":"x","meta":{"id":"a","n":1,"tags":["t",{"at":1}]}}`, "j1a1w1")},
			run2: []assert.Effect{effect("webhook", "", `{"to":"x","meta":{"id":"b","n":1,"tags":["t",{"at":2}]}}`, "j1a1w1")},
			want: []string{"webhook.meta.id", "webhook.meta.tags.1.at"},
		},
		{
			name: "an array of another length is volatile whole",
			run1: []assert.Effect{effect("webhook", "", `{"meta":{"ids":[1]}}`, "j1a1w1")},
			run2: []assert.Effect{effect("webhook", "", `{"meta":{"ids":[1,2]}}`, "j1a1w1")},
			want: []string{"webhook.meta.ids"},
		},
		{
			name: "a kind with another count is not paired",
			run1: []assert.Effect{effect("email", "", receiptAsha, "j1a1w1")},
			run2: []assert.Effect{effect("email", "", receiptBen, "j1a1w1"), effect("email", "", receiptAsha, "j1a1w1")},
		},
		{
			name: "failed and replayed calls are left out",
			run1: []assert.Effect{effect("email", "", receiptAsha, "j1a1w1"), failed(effect("email", "", receiptBen, "j1a1w1"), "down")},
			run2: []assert.Effect{effect("email", "", receiptAsha, "j1a1w1")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, assert.VolatileEffects(tt.run1, tt.run2))
		})
	}
}

// A volatile or ignored path inside a payload field leaves the rest of
// the field compared.
func TestDiffEffectsPath(t *testing.T) {
	once := []assert.Effect{effect("webhook", "", `{"to":"x","meta":{"id":"a","n":1}}`, "j1a1w1")}
	same := []assert.Effect{effect("webhook", "", `{"to":"x","meta":{"id":"b","n":1}}`, "j1a2w2")}
	raised := []assert.Effect{effect("webhook", "", `{"to":"x","meta":{"id":"c","n":2}}`, "j1a2w2")}
	for _, opts := range []assert.EffectOptions{
		{Volatile: []string{"webhook.meta.id"}},
		{IgnoreFields: []string{"webhook.meta.id"}},
	} {
		require.Nil(t, assert.DiffEffects(once, same, opts))
		d := assert.DiffEffects(once, raised, opts)
		require.NotNil(t, d)
		require.Equal(t, 1, d.Missing)
		require.Equal(t, 1, d.Extra)
		require.Contains(t, d.String(), `meta={"n":2}`)
	}
	require.NotNil(t, assert.DiffEffects(once, same, assert.EffectOptions{IgnoreFields: []string{"email.meta.id"}}), "another kind's path")
}

func TestCheckEffects(t *testing.T) {
	once := []assert.Effect{effect("email", "", receiptAsha, "j1a1w1")}
	twice := []assert.Effect{effect("email", "", receiptAsha, "j1a1w1"), effect("email", "", receiptAsha, "j1a2w2")}

	require.NoError(t, assert.CheckEffects(once, once, assert.EffectOptions{}))
	require.NoError(t, assert.CheckEffects(once, twice, assert.EffectOptions{Policies: map[string]assert.Policy{"email": assert.Repeatable}}),
		"Repeatable is a policy CheckEffects accepts")

	err := assert.CheckEffects(once, twice, assert.EffectOptions{Label: "run-twice"})
	var ee *assert.EffectsDiffer
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 1, ee.Diff.Extra)
	goldenText(t, "effects_differ", err.Error()+"\n")

	err = assert.CheckEffects(once, twice, assert.EffectOptions{Policies: map[string]assert.Policy{"email": assert.Policy(7)}})
	require.Equal(t, `[twice] EffectOptions.Policies["email"] is Policy(7); use assert.ExactlyOnce, assert.AtLeastOnce, assert.AtMostOnce, assert.Repeatable or assert.AckRecorded`, blame.Message(err))
	d := assert.DiffEffects(once, twice, assert.EffectOptions{Policies: map[string]assert.Policy{"email": assert.Policy(7)}})
	require.NotNil(t, d, "an unknown policy is held to exactly-once")
	require.Equal(t, []string{"email has the unknown policy Policy(7) and is held to exactly-once"}, d.Notes)
	require.Equal(t, "[twice] not idempotent: the effects differ from one clean run", (&assert.EffectsDiffer{}).Error())
}

func TestEffectsEqual(t *testing.T) {
	once := []assert.Effect{effect("email", "", receiptAsha, "j1a1w1")}
	rt := &recordingT{}
	require.True(t, assert.EffectsEqual(rt, once, once, assert.EffectOptions{}))
	require.Empty(t, rt.errors)

	require.False(t, assert.EffectsEqual(rt, once, nil, assert.EffectOptions{Label: "crash-mid-job", Policies: map[string]assert.Policy{"email": assert.AtLeastOnce}}))
	require.Len(t, rt.errors, 1, "every finding in one message")
	require.Equal(t, 2, rt.helpers)
	goldenText(t, "effects_equal_missing", rt.errors[0]+"\n")
}

// An effect whose only record is the queue's ack tolerates the duplicate
// a redelivery of its job made, not one a producer's copy or an overlap
// made, and never a missing one.
func TestAckRecorded(t *testing.T) {
	opts := assert.EffectOptions{Label: "crash-before-ack", Policies: map[string]assert.Policy{"email": assert.AckRecorded}}
	once := []assert.Effect{effect("email", "", receiptAsha, "j1a1w1")}
	twice := []assert.Effect{effect("email", "", receiptAsha, "j1a1w1"), effect("email", "", receiptAsha, "j1a2w2")}

	opts.Redelivered = true
	require.Nil(t, assert.DiffEffects(once, twice, opts), "a redelivery's duplicate is the window the ack leaves")
	d := assert.DiffEffects(once, nil, opts)
	require.NotNil(t, d, "a missing effect is a finding")
	require.Equal(t, 1, d.Missing)

	opts.Redelivered = false
	d = assert.DiffEffects(once, twice, opts)
	require.NotNil(t, d, "a copy's or an overlap's duplicate is a finding")
	require.Equal(t, 1, d.Extra)
	require.Contains(t, d.String(), "email is recorded by the queue's ack")
	require.NoError(t, assert.CheckEffects(once, once, opts), "AckRecorded is a policy CheckEffects takes")
}

func TestPolicyString(t *testing.T) {
	for p, want := range map[assert.Policy]string{
		assert.ExactlyOnce: "exactly-once", assert.AtLeastOnce: "at-least-once", assert.AtMostOnce: "at-most-once", assert.Repeatable: "repeatable", assert.AckRecorded: "ack-recorded", assert.Policy(-1): "Policy(-1)",
	} {
		require.Equal(t, want, p.String())
	}
}

// BenchmarkDiffEffects compares two logs of 1,000 emails to 100 customers,
// the scenario's with one duplicate.
func BenchmarkDiffEffects(b *testing.B) {
	var once []assert.Effect
	for i := range 1000 {
		once = append(once, effect("email", "", fmt.Sprintf(`{"to":"c%d@example.com","subject":"Your receipt","body":"Order %d"}`, i%100, i), "j1a1w1"))
	}
	twice := append(append([]assert.Effect(nil), once...), once[0])
	b.ReportAllocs()
	for b.Loop() {
		if assert.DiffEffects(once, twice, assert.EffectOptions{}) == nil {
			b.Fatal("no finding")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(len(twice)), "µs/effect")
}

// Effects that match on payload but carry different keys (a random
// idempotency key per attempt) print each with its own key, not the clean
// run's on every line.
func TestDiffEffectsOwnText(t *testing.T) {
	once := []assert.Effect{effect("payment", "k-clean", payout381, "j1a1w1")}
	twice := []assert.Effect{effect("payment", "k-first", payout381, "j1a1w1"), effect("payment", "k-second", payout381, "j1a2w2")}
	d := assert.DiffEffects(once, twice, assert.EffectOptions{})
	require.NotNil(t, d)
	var texts []string
	for _, l := range d.Lines {
		texts = append(texts, l.Op+" "+l.Text)
	}
	require.Equal(t, []string{
		`  payment key=k-first destination=acct_381 amount=48250 currency=eur`,
		`+ payment key=k-second destination=acct_381 amount=48250 currency=eur`,
	}, texts)
}
