package execute

import (
	"strings"

	"github.com/runtwice/twice/internal/freshdb"
)

// Written is a row a scenario wrote and committed, with who wrote it.
type Written struct {
	freshdb.Write
	// Delivery is the index in Output.Deliveries of the delivery whose
	// step wrote it, and Step that step's number (its
	// DeliveryOutcome.Steps[Step-1]); Delivery is -1 when no granted step
	// matches (a connection the harness does not see, work after the
	// handler returned).
	Delivery, Step int
}

// attribute tags each write with the delivery and step that wrote it.
// A backend runs one statement at a time, and the deliveries that share
// one (a returned delivery's backend given to the next) use it one after
// another, so a backend's writes, grouped by the statement that made
// them (its start and text, as the history holds them), come in the order
// its steps were granted: each group is the next statement granted on
// that backend whose text is the group's (a statement that wrote nothing,
// or was cut before it reached the server, has no group). A step that is
// a batch (pgx.Batch: the proxy joins its statements with ";\n") grants
// each of its statements in turn, and the server starts each anew.
func (e *execution) attribute(ws []freshdb.Write) []Written {
	type granted struct {
		d, step int
		sql     string
	}
	onPID := map[uint32][]granted{}
	next := make([]int, len(e.deliveries)) // each delivery's steps taken so far, in e.granted
	for _, n := range e.granted {
		i := n - 1
		if i < 0 || i >= len(e.deliveries) || next[i] >= len(e.deliveries[i].taken) {
			continue
		}
		req := e.deliveries[i].taken[next[i]]
		next[i]++
		if !req.effect && req.step.PID != 0 {
			for _, sql := range strings.Split(req.step.SQL, ";\n") {
				onPID[req.step.PID] = append(onPID[req.step.PID], granted{i, next[i], sql})
			}
		}
	}
	type statement struct {
		pid uint32
		at  int64
	}
	out := make([]Written, len(ws))
	seen := map[statement]granted{}
	for i, w := range ws {
		out[i] = Written{Write: w, Delivery: -1}
		st := statement{w.PID, w.At.UnixMicro()}
		g, ok := seen[st]
		if !ok {
			g = granted{d: -1}
			steps := onPID[w.PID]
			for len(steps) > 0 {
				s := steps[0]
				steps = steps[1:]
				if sameStatement(s.sql, w.Query) {
					g = s
					break
				}
			}
			if g.d >= 0 {
				onPID[w.PID] = steps
			}
			seen[st] = g
		}
		out[i].Delivery, out[i].Step = g.d, g.step
	}
	return out
}

// sameStatement reports whether a step's text and the server's text of
// the statement that wrote a row are one statement: the same, or one
// holding the other (the proxy joins a batch's statements with ";\n").
func sameStatement(step, query string) bool {
	step, query = strings.TrimSpace(step), strings.TrimSpace(query)
	if step == "" || query == "" {
		return false
	}
	return step == query || strings.Contains(step, query) || strings.Contains(query, step)
}
