package harness

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runtwice/twice/internal/render"
)

// Under go test -v a check says what it did: one line when it passes, and
// a progress line at least every progressEvery while it runs, so a long
// check (a handler hanging on retries) is never silent.

// progressEvery is how often a running check logs its progress under -v.
var progressEvery = 10 * time.Second

// verbose reports whether go test runs with -v; a variable so tests can
// turn it on.
var verbose = testing.Verbose

// progress counts a Run's scenarios as they finish.
type progress struct {
	total, done atomic.Int64
	stuck       stuck // what the running scenarios wait on; see stuck.go
}

type progressKey struct{}

// progressOf returns the progress counter in ctx, if any.
func progressOf(ctx context.Context) *progress {
	p, _ := ctx.Value(progressKey{}).(*progress)
	return p
}

// logProgress logs, under -v, how far the check of job has come every
// progressEvery, until stop is called. ctx carries the counter Run fills.
func logProgress(t tb, job string) (ctx context.Context, stop func()) {
	ctx = t.Context()
	if !verbose() {
		return ctx, func() {}
	}
	p := &progress{}
	ctx = context.WithValue(ctx, progressKey{}, p)
	start := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				elapsed := time.Since(start).Round(time.Second)
				waiting := p.stuck.longest(progressEvery)
				if total := p.total.Load(); total > 0 {
					t.Logf("[twice] job %q: %d of %d scenarios done after %s%s", job, p.done.Load(), total, elapsed, waiting)
				} else {
					t.Logf("[twice] job %q: still checking after %s%s", job, elapsed, waiting)
				}
			}
		}
	})
	return ctx, func() { close(done); wg.Wait() }
}

// logPassed logs, under -v, the one line of a passing check.
func logPassed(t tb, res *Result) {
	if verbose() {
		t.Logf("[twice] ok: job %q: %d scenarios%s, none differs from one clean run (%s)", res.Job, len(res.Scenarios), render.InShard(&res.Result), res.Duration.Round(time.Millisecond))
		for _, line := range reductionLines(res) {
			t.Logf("[twice] job %q: %s", res.Job, line)
		}
		if note := volatileNote(res); note != "" {
			t.Logf("%s", note)
		}
	}
}
