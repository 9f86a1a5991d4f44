package execute

import (
	"fmt"
	"strings"
	"sync"
)

// stragglers are handler goroutines of dead or ended deliveries that had
// not returned when their scenario was over. The harness does not wait for
// them (a client retrying with backoff, deaf to its context, could keep a
// check waiting for minutes); it reports, once per check, those still
// running at its end.
type stragglers struct {
	mu   sync.Mutex
	list []straggler
}

type straggler struct {
	what     string // "j1a1w1 in crash-mid-job (schedule ...)"
	returned <-chan struct{}
}

// linger notes a goroutine that outlived its scenario.
func (r *Executor) linger(what string, returned <-chan struct{}) {
	r.stragglers.mu.Lock()
	defer r.stragglers.mu.Unlock()
	r.stragglers.list = append(r.stragglers.list, straggler{what: what, returned: returned})
}

// maxStragglersNamed bounds how many goroutines the note names.
const maxStragglersNamed = 5

// stillRunning is the note about the goroutines that have not returned by
// now, or "" when every one has.
func (r *Executor) stillRunning() string {
	r.stragglers.mu.Lock()
	defer r.stragglers.mu.Unlock()
	var names []string
	for _, s := range r.stragglers.list {
		select {
		case <-s.returned:
		default:
			names = append(names, s.what)
		}
	}
	r.stragglers.list = nil
	if len(names) == 0 {
		return ""
	}
	n, word := len(names), "goroutines"
	if n == 1 {
		word = "goroutine"
	}
	if n > maxStragglersNamed {
		names = append(names[:maxStragglersNamed], fmt.Sprintf("and %d more", n-maxStragglersNamed))
	}
	return fmt.Sprintf("%d handler %s of deliveries that had ended or died still running when the check ended, not waited for: %s. "+
		"Their context is cancelled and their connections and effects are refused, so nothing they do is recorded; "+
		"a handler that ignores its context (a database client retrying with backoff) keeps its goroutine alive",
		n, word, strings.Join(names, ", "))
}
