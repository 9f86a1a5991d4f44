package freshdb

import "context"

// Hooks for the black-box tests and benchmarks.

// LockClass is the first key of the run lock, so tests can fake a live run.
const LockClass = lockClass

// RunKey is the second key of the run lock of run ID id.
func RunKey(id string) uint32 {
	k, _ := runKey(id)
	return k
}

// LineCol exposes the position conversion.
var LineCol = lineCol

// Variant returns a template sharing t's database whose Fresh works the given
// way: "reuse" (the default), or "clone" with strategy "WAL_LOG" or
// "FILE_COPY". It has its own pool of idle databases.
func Variant(t *Template, how, strategy string) *Template {
	v := &Template{Name: t.Name, r: t.r, mode: modeReuse, strategy: t.strategy, reset: t.reset, logged: t.logged, history: t.history}
	if how == "clone" {
		v.mode = modeClone
		v.strategy = strategy
	}
	return v
}

// ResetUnavailable says why t cannot reset in place ("" when it can).
func ResetUnavailable(t *Template) string { return t.why }

// RunMarker is the comment a run with ID id writes on its databases.
var RunMarker = runMarker

// SetUndoFrom sets the size from which tables are undone through the
// history, for templates prepared until the test ends.
func SetUndoFrom(t interface{ Cleanup(func()) }, n int64) {
	old := undoFrom
	undoFrom = n
	t.Cleanup(func() { undoFrom = old })
}

// TemplateBuilding enters a template build on srv's run that is still
// under way, as Prepare does before building; finish ends it with t, as
// the builder does.
func TemplateBuilding(ctx context.Context, srv Server, key string) (finish func(t *Template), err error) {
	r, err := runFor(ctx, srv)
	if err != nil {
		return nil, err
	}
	s := &start[*Template]{done: make(chan struct{})}
	r.mu.Lock()
	r.templates[key] = s
	r.mu.Unlock()
	return func(t *Template) { s.v = t; close(s.done) }, nil
}
