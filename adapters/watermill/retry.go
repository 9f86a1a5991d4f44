package twicewatermill

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
)

// RetrySpeedup is how many times shorter than configured Retry runs
// middleware.Retry's sleeps.
const RetrySpeedup = 10000

// Retry is Watermill's own middleware.Retry in the chain, at its place
// among Middleware's, with its production settings (100ms to 1s, 10
// retries): the middleware runs as given, its retries, hooks and
// ShouldRetry included, but its sleeps are RetrySpeedup times shorter.
// Watermill's Retry takes no clock (it sleeps on cenkalti/backoff's
// timers), so its waits cannot move the harness clock; shortened, a check
// that retries a failing handler ten times at every fault takes no
// minutes of wall time. The hooks see the configured delays, and every
// delivery's Settled says the sleeps were shortened.
//
// Give it the Retry value as production builds it, not
// middleware.Retry{...}.Middleware through Middleware, which would sleep
// the full intervals.
func Retry(r middleware.Retry) Option {
	return func(o *options) {
		o.middleware = append(o.middleware, middlewareEntry{retry: &retryEntry{r: r}})
	}
}

type retryEntry struct {
	r middleware.Retry
}

// middleware is r with its intervals shortened and its hooks told the
// configured delays.
func (e *retryEntry) middleware() message.HandlerMiddleware {
	r := e.r
	r.InitialInterval /= RetrySpeedup
	r.MaxInterval /= RetrySpeedup
	r.MaxElapsedTime /= RetrySpeedup
	if hook := e.r.OnRetryHook; hook != nil {
		r.OnRetryHook = func(n int, delay time.Duration) { hook(n, delay*RetrySpeedup) }
	}
	if should := e.r.ShouldRetry; should != nil {
		r.ShouldRetry = func(p middleware.RetryParams) bool {
			p.Delay *= RetrySpeedup
			return should(p)
		}
	}
	return r.Middleware
}

// retryNote says, in a delivery's Settled, that Retry's sleeps were
// shortened; empty without Retry.
func (j *jobSpec) retryNote() string {
	for _, m := range j.opts.middleware {
		if m.retry != nil {
			r := m.retry.r
			return fmt.Sprintf("Watermill's Retry middleware (%d retries, %v to %v) slept %dx shorter than configured, on the wall clock; its waits do not move the harness clock",
				r.MaxRetries, r.InitialInterval, r.MaxInterval, RetrySpeedup)
		}
	}
	return ""
}
