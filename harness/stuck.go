package harness

import (
	"fmt"
	"sync"
	"time"
)

// stuck is what the running scenarios of a check are waiting on, for the
// progress line under -v: a check that has not moved for a while names the
// delivery it waits on and where that delivery is (a step that reached
// the server and has not finished, or its own code between two steps),
// instead of only counting scenarios.
type stuck struct {
	mu     sync.Mutex
	byExec map[*execution]map[string]time.Time // what each delivery is doing -> since when
}

// note records, from e's loop, where each of e's running deliveries is;
// a delivery still where it was keeps its time. It does nothing unless
// progress is logged.
func (e *execution) noteProgress() {
	p := progressOf(e.ctx)
	if p == nil {
		return
	}
	now := time.Now()
	p.stuck.mu.Lock()
	defer p.stuck.mu.Unlock()
	if p.stuck.byExec == nil {
		p.stuck.byExec = map[*execution]map[string]time.Time{}
	}
	was := p.stuck.byExec[e]
	is := map[string]time.Time{}
	for _, d := range e.deliveries {
		if !d.started || d.ended {
			continue
		}
		what := fmt.Sprintf("delivery %s (attempt %d) of schedule %s: %s", d.spec.Label(), d.spec.Attempt, scheduleName(e.sched), d.where())
		if since, ok := was[what]; ok {
			is[what] = since
		} else {
			is[what] = now
		}
	}
	p.stuck.byExec[e] = is
}

// forgetProgress drops e once it has ended.
func (e *execution) forgetProgress() {
	if p := progressOf(e.ctx); p != nil {
		p.stuck.mu.Lock()
		delete(p.stuck.byExec, e)
		p.stuck.mu.Unlock()
	}
}

// longest is the delivery that has been where it is longest, if that is
// at least min, in words.
func (s *stuck) longest(min time.Duration) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var what string
	var since time.Time
	for _, ds := range s.byExec {
		for w, t := range ds {
			if what == "" || t.Before(since) {
				what, since = w, t
			}
		}
	}
	if what == "" || time.Since(since) < min {
		return ""
	}
	return fmt.Sprintf("; waiting %s on %s", time.Since(since).Round(time.Second), what)
}
