package execute

import (
	"context"
	"sync"
	"time"

	"github.com/runtwice/twice/assert"
)

// jobStart is how far the clock had moved when the job effectively
// started: at the start of the first delivery that left a trace (a commit
// or an effect). Deliveries before it died without one, so as far as the
// database and the providers can tell the job ran only from then on, and
// a clean run at that time is what the scenario must match.
func (e *execution) jobStart() time.Duration {
	var moved time.Duration
	for _, d := range e.deliveries {
		moved += d.spec.Advance
		if d.durable {
			return moved
		}
	}
	return 0
}

// shiftedRefs caches clean runs whose clock started later than
// Config.ClockStart, by how much later.
type shiftedRefs struct {
	mu   sync.Mutex
	runs map[time.Duration]*shiftedRef
}

type shiftedRef struct {
	once    sync.Once
	state   *assert.Snapshot
	effects []assert.Effect
	err     error
}

// referenceAt returns the state and effects of one clean delivery whose
// clock started shift after Config.ClockStart; shift zero is res's
// reference. A job that fails when run cleanly that late has no such
// reference, and the scenario is held to the one at the start.
func (r *runner) referenceAt(ctx context.Context, shift time.Duration, res *Result) (*assert.Snapshot, []assert.Effect, error) {
	if shift == 0 {
		return res.Reference, res.ReferenceEffects, nil
	}
	r.shifted.mu.Lock()
	if r.shifted.runs == nil {
		r.shifted.runs = map[time.Duration]*shiftedRef{}
	}
	run := r.shifted.runs[shift]
	if run == nil {
		run = &shiftedRef{}
		r.shifted.runs[shift] = run
	}
	r.shifted.mu.Unlock()
	run.once.Do(func() {
		run.state, run.effects, run.err = r.referenceShifted(ctx, shift)
	})
	if run.err != nil {
		return nil, nil, run.err
	}
	if run.state == nil {
		return res.Reference, res.ReferenceEffects, nil
	}
	return run.state, run.effects, nil
}

// referenceShifted is a clean run after the clock moved by shift; nil
// state when the job fails then.
func (r *runner) referenceShifted(ctx context.Context, shift time.Duration) (*assert.Snapshot, []assert.Effect, error) {
	db, err := r.tmpl.Fresh(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = r.giveBack(context.WithoutCancel(ctx), db) }()
	ex, err := r.clean(ctx, db, shift)
	if err != nil {
		return nil, nil, err
	}
	if ex.cleanFailure() != "" {
		return nil, nil, nil
	}
	snap, err := ex.snapshot(ctx)
	if err != nil {
		return nil, nil, err
	}
	return snap, ex.effects.effects(), nil
}
