package execute

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/runtwice/twice/internal/render"
)

// Stuck is what the running scenarios of a check are waiting on, for the
// progress line under -v: a check that has not moved for a while names the
// delivery it waits on and where that delivery is (a step that reached
// the server and has not finished, or its own code between two steps),
// instead of only counting scenarios. WithStuck hands one to the
// executions run under a context.
type Stuck struct {
	mu     sync.Mutex
	byExec map[*execution]map[string]time.Time // what each delivery is doing -> since when
}

// note records, from e's loop, where each of e's running deliveries is;
// a delivery still where it was keeps its time. It does nothing unless
// progress is logged.
func (e *execution) noteProgress() {
	st := stuckOf(e.ctx)
	if st == nil {
		return
	}
	now := time.Now()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.byExec == nil {
		st.byExec = map[*execution]map[string]time.Time{}
	}
	was := st.byExec[e]
	is := map[string]time.Time{}
	for _, d := range e.deliveries {
		if !d.life.live() {
			continue
		}
		what := fmt.Sprintf("delivery %s (attempt %d) of schedule %s: %s", d.spec.Label(), d.spec.Attempt, render.ScheduleName(e.sched), d.where())
		if since, ok := was[what]; ok {
			is[what] = since
		} else {
			is[what] = now
		}
	}
	st.byExec[e] = is
}

// forgetProgress drops e once it has ended.
func (e *execution) forgetProgress() {
	if st := stuckOf(e.ctx); st != nil {
		st.mu.Lock()
		delete(st.byExec, e)
		st.mu.Unlock()
	}
}

// Longest is the delivery that has been where it is longest, if that is
// at least min, in words: "; waiting 40s on delivery j1a2w2 ...".
func (s *Stuck) Longest(min time.Duration) string {
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

type stuckKey struct{}

// WithStuck returns ctx carrying s: executions run under it note in s
// where their deliveries are.
func WithStuck(ctx context.Context, s *Stuck) context.Context {
	return context.WithValue(ctx, stuckKey{}, s)
}

func stuckOf(ctx context.Context) *Stuck {
	s, _ := ctx.Value(stuckKey{}).(*Stuck)
	return s
}
