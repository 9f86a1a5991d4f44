package render

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/text"
)

// Culprit is who wrote a row past what a clean run writes, in words:
// "culprit: delivery j1a2w2 (attempt 2), step 1 `UPDATE customers SET points =
// points + 50 WHERE id = 77` updated customers row 77: points 170 -> 220".
func Culprit(c result.Culprit) string {
	who := "no step the harness granted (a connection of the handler's own, or work after its return)"
	if c.Delivery.Job > 0 {
		who = fmt.Sprintf("delivery %s (attempt %d)", c.Delivery.Label(), c.Delivery.Attempt)
		if c.Step > 0 {
			who += fmt.Sprintf(", step %d", c.Step)
		}
	}
	switch {
	case c.Effect != "" && c.Op == "missing":
		return fmt.Sprintf("culprit: the clean run's `%s` never happened: %s", c.Effect, endedWithout(c))
	case c.Effect != "":
		return fmt.Sprintf("culprit: %s made `%s` beyond the clean run's", who, c.Effect)
	}
	row := c.Table
	if c.Row != "" {
		row += " row " + c.Row
	}
	if missing, ok := strings.CutPrefix(c.Op, "missing "); ok {
		return fmt.Sprintf("culprit: the clean run's `%s` (%s %s) never happened: %s", text.OneLine(c.SQL), missing, row, endedWithout(c))
	}
	did := map[string]string{"insert": "inserted", "update": "updated", "delete": "deleted"}[c.Op]
	line := fmt.Sprintf("culprit: %s `%s` %s %s", who, text.OneLine(c.SQL), cmp.Or(did, c.Op), row)
	if len(c.Changes) > 0 {
		var ch []string
		for _, x := range c.Changes {
			ch = append(ch, fmt.Sprintf("%s %s -> %s", x.Column, x.Before, x.After))
		}
		line += ": " + strings.Join(ch, ", ")
	}
	return line
}

// Pattern says what a pattern means and how to fix it, in the terms of
// twice's lesson; "" for none.
func Pattern(p result.Pattern) string {
	switch p {
	case result.IncrementWithoutRecord:
		return "increment without a record: the retry applied the same change again, because nothing records that it was applied. " +
			"Fix: in the same transaction, insert a ledger row keyed by the job (a unique key, INSERT ... ON CONFLICT DO NOTHING) and apply the change only when that insert inserted (examples/loyalty)"
	case result.InsertWithoutKey:
		return "insert without a unique key: the retry inserted the row again, because nothing unique stops a second. " +
			"Fix: give the row a unique key from the job's stable ID and insert with ON CONFLICT DO NOTHING, not after an if"
	case result.CheckThenAct:
		return "check-then-act race: deliveries that ran at once each checked that the row was not there, then each inserted it; a check is no lock. " +
			"Fix: a unique constraint on what makes the work one (the job's stable ID) and INSERT ... ON CONFLICT DO NOTHING, acting only when it inserted; not an if"
	case result.EffectWithoutRecord:
		return "effect without a record: the retry made the effect again, because nothing records that it was made and the call carries no idempotency key. " +
			"Fix: give the call a key from the job's stable ID, or record the send (an outbox or sent row keyed by the job) and check it first, choosing per the effect's policy which way to be wrong"
	case result.RetryWithoutKey:
		return "retry without a key: the delivery sent the call again after its answer timed out or was lost, with no idempotency key, and the provider, which had made the first call, made it again. " +
			"Fix: send a key the provider deduplicates by (an Idempotency-Key or event ID from the job's stable ID), or do not retry a call whose outcome is unknown"
	case result.KeyPerAttempt:
		return "key per attempt: the idempotency key differs between deliveries of one job, so the provider cannot tell the retry's call from a new one. " +
			"Fix: derive the key from the job's stable ID (or store it before the first call and reuse it)"
	case result.KeyWindowPassed:
		return "key window passed: the retry carried the first call's key, but came after the provider had forgotten it (a redrive days later). " +
			"Fix: record the call's outcome in the database before the key window ends, or look the payment up by key before paying again"
	case result.DedupWindowPassed:
		return "dedup window passed: the producer's copy came after the queue had stopped refusing copies (its dedup window, a task ID's retention, a unique job's period had ended), so the queue took it as a new job and it did the work again. " +
			"Fix: record the outcome in the database, keyed by the business ID, which outlives any window, or keep the queue's dedup longer than the producer ever retries"
	case result.EffectLost:
		return "effect lost: the work was recorded as done (or failed) without the effect, and nothing made it later. " +
			"Fix: make the effect before recording the work done, with a key so a retry's repeat is harmless, or write an outbox row in the same transaction as the record"
	case result.WorkLost:
		return "work lost: a delivery died between recording the work as done and doing it (two transactions), and the retry trusted the record. " +
			"Fix: write the record and the work in one transaction"
	case result.AckBeforeWork:
		return "ack before the work: the queue took the job as done (an ack, an offset commit) before the work was written, so when the worker died in between, nothing delivered the job again. " +
			"Fix: ack after the write (commit the offset after the transaction commits), and make the write safe to repeat with an inbox row keyed by the business ID"
	case result.ResultChanged:
		return "a retry changed a stored result: the update computes what it stores from what is there (or from the moment), so a second run stores another value. " +
			"Fix: compute the value once and store it before acting, and make the update conditional on the state it expects (WHERE status = 'packed'), so a retry finds it done"
	case result.KeyPerEnqueue:
		return "key per enqueue: the record, or the idempotency key of a call, comes from the queue's job ID (or from the call itself), and a producer's retry enqueues a copy with a new ID, so the copy does not find the first's record and the provider takes its call for a new one. " +
			"Fix: key the record and the call by a business ID every copy shares (the order's, the payout's week), or have the queue refuse the copy (a unique job key)"
	}
	return ""
}

// Culprits are the lines naming cs and the patterns they show. A
// pattern's fix is said once: said holds the patterns whose fix an
// earlier paragraph of the same output gave, and gains cs's.
func Culprits(cs []result.Culprit, said map[result.Pattern]bool) []string {
	var out []string
	for _, c := range cs {
		line, fix := Culprit(c), Pattern(c.Pattern)
		if fix != "" && said[c.Pattern] {
			name, _, _ := strings.Cut(fix, ":")
			line, fix = line+" ("+name+": the fix is above)", ""
		}
		out = append(out, line)
		if fix != "" {
			said[c.Pattern] = true
			out = append(out, "  "+fix)
		}
	}
	return out
}

// endedWithout says which delivery ended without the work a missing
// culprit names.
func endedWithout(c result.Culprit) string {
	if c.Delivery.Job == 0 {
		return "no delivery made it"
	}
	return fmt.Sprintf("delivery %s (attempt %d) ended without it, and no later delivery made it", c.Delivery.Label(), c.Delivery.Attempt)
}
