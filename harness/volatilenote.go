package harness

import (
	"fmt"
	"strings"

	"github.com/runtwice/twice/assert"
)

// volatileNote is the line a passing check logs under -v about what it
// left out as volatile, or "": a column that differs between two clean
// runs is compared nowhere, so a pass says so every time, and names the
// columns that hold times, which a handler filling them from time.Now()
// instead of d.Now makes volatile.
func volatileNote(res *Result) string {
	left := append(append([]string(nil), res.Volatile...), res.VolatileEffects...)
	if len(left) == 0 {
		return ""
	}
	line := fmt.Sprintf("[twice] job %q: left out of every comparison as volatile (they differ between two clean runs): %s", res.Job, strings.Join(left, ", "))
	if times := timeColumns(res.Reference, res.Volatile); len(times) > 0 {
		verb := "holds a time"
		if len(times) > 1 {
			verb = "hold times"
		}
		line += fmt.Sprintf("; %s %s: if the handler takes it from time.Now(), use d.Now, so that a time a redelivery moves is compared", strings.Join(times, ", "), verb)
	}
	return line
}

// timeColumns are the volatile "table.column"s of ref whose type is a date
// or time.
func timeColumns(ref *assert.Snapshot, volatile []string) []string {
	if ref == nil {
		return nil
	}
	types := map[string]string{}
	for _, t := range ref.Tables {
		for _, c := range t.Columns {
			types[t.Name+"."+c.Name] = c.Type
		}
	}
	var out []string
	for _, v := range volatile {
		if typ := types[v]; strings.HasPrefix(typ, "timestamp") || strings.HasPrefix(typ, "time") || typ == "date" {
			out = append(out, v)
		}
	}
	return out
}
