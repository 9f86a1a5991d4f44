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
	row := c.Table
	if c.Row != "" {
		row += " row " + c.Row
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
	case result.KeyPerEnqueue:
		return "key per enqueue: the record is keyed by the queue's job ID, and a producer's retry enqueues a copy with a new ID, so the copy does not find the first's record. " +
			"Fix: key the record by a business ID every copy shares (the order's), or have the queue refuse the copy (a unique job key)"
	}
	return ""
}

// Culprits are the lines naming cs and the patterns they show, each
// pattern once.
func Culprits(cs []result.Culprit) []string {
	var out []string
	said := map[result.Pattern]bool{}
	for _, c := range cs {
		out = append(out, Culprit(c))
		if fix := Pattern(c.Pattern); fix != "" && !said[c.Pattern] {
			said[c.Pattern] = true
			out = append(out, "  "+fix)
		}
	}
	return out
}
