package freshdb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/text"
)

// DefaultStepTimeout is how long a setup step may run when Step.Timeout is
// zero: generous, as real migrations can be slow, but a step that never
// returns must not hang the test binary until go test's own timeout.
const DefaultStepTimeout = 2 * time.Minute

// stepGrace is how long a step has to return once its context is
// cancelled before it is abandoned.
const stepGrace = 3 * time.Second

// deadlineCtx is cancelled by the step runner, not by a timer, so the
// server's sessions can be read while the step is still stuck; it still
// reports its deadline to code that plans by it.
type deadlineCtx struct {
	context.Context
	deadline time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// errStepPanic marks a step whose func panicked.
var errStepPanic = errors.New("panicked")

// runStepWithin runs s on conn within its deadline. A step still running at
// the deadline fails with what its database's sessions were doing; its
// context is then cancelled, and a step that does not return within a
// short grace is abandoned: abandoned is true, its goroutine keeps conn and
// closes it once the step returns, and the caller must not touch conn.
func (r *run) runStepWithin(ctx context.Context, db string, conn *pgx.Conn, s Step) (abandoned bool, err error) {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultStepTimeout
	}
	deadline := time.Now().Add(timeout)
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stepCtx := deadlineCtx{Context: cctx, deadline: deadline}
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		stepCtx.deadline = d
	}

	self := conn.PgConn().PID()
	var mu sync.Mutex
	var gaveUp bool
	done := make(chan error, 1)
	go func() {
		err := runStepSafely(stepCtx, conn, s)
		mu.Lock()
		defer mu.Unlock()
		if gaveUp {
			_ = conn.Close(context.Background())
			return
		}
		done <- err
	}()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var why error
	select {
	case err := <-done:
		return false, err
	case <-ctx.Done():
		why = blame.Userf("setup step %s was interrupted: %w", stepName(s), context.Cause(ctx))
	case <-timer.C:
		// Read the sessions before cancelling: cancelling ends their waits.
		why = blame.Userf("setup step %s did not finish within %v (the setup deadline, harness.Config.SetupTimeout); %s",
			stepName(s), timeout, r.sessions(context.WithoutCancel(ctx), db, self))
	}
	cancel(why)
	grace := time.NewTimer(stepGrace)
	defer grace.Stop()
	select {
	case stepErr := <-done:
		return false, afterCancel(why, stepErr)
	case <-grace.C:
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case stepErr := <-done: // returned just now
		return false, afterCancel(why, stepErr)
	default:
	}
	gaveUp = true
	return true, fmt.Errorf("%w\nthe step did not return within %v of its context being cancelled and was abandoned: its goroutine may still be running", why, stepGrace)
}

// afterCancel adds what a step returned once cancelled, unless that only
// repeats the cancellation.
func afterCancel(why, stepErr error) error {
	if stepErr == nil || errors.Is(stepErr, context.Canceled) || errors.Is(stepErr, why) {
		return why
	}
	return fmt.Errorf("%w; once cancelled it returned: %w", why, stepErr)
}

// runStepSafely runs the step, turning a panic in a setup func into an
// error rather than a crash of the test binary.
func runStepSafely(ctx context.Context, conn *pgx.Conn, s Step) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = blame.Userf("setup step %s %w: %v", stepName(s), errStepPanic, p)
		}
	}()
	return runStep(ctx, conn, s)
}

func stepName(s Step) string {
	name := s.Name
	if name == "" {
		name = "SQL"
	}
	if s.Layout != "" {
		name += " (" + s.Layout + ")"
	}
	return name
}

// sessions says what every session in database db is doing, for a step
// that overran its deadline: its state, what it waits on and who blocks it,
// and its query. self is the PID of the step's own connection.
func (r *run) sessions(ctx context.Context, db string, self uint32) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rows, err := r.admin.Query(ctx, `
		SELECT pid, coalesce(state, ''), coalesce(wait_event_type, ''), coalesce(wait_event, ''),
		       coalesce(pg_blocking_pids(pid)::text, '{}'), coalesce(query, '')
		FROM pg_stat_activity WHERE datname = $1 ORDER BY backend_start, pid`, db)
	if err != nil {
		return fmt.Sprintf("its database's sessions could not be read: %v", err)
	}
	type session struct {
		pid                          int64
		state, waitType, wait, by, q string
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (session, error) {
		var s session
		return s, row.Scan(&s.pid, &s.state, &s.waitType, &s.wait, &s.by, &s.q)
	})
	if err != nil {
		return fmt.Sprintf("its database's sessions could not be read: %v", err)
	}
	if len(list) == 0 {
		return "no session is open in its database: it is waiting on something outside PostgreSQL"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "sessions in its database:")
	for _, s := range list {
		fmt.Fprintf(&b, "\n  pid %d", s.pid)
		if s.pid == int64(self) {
			b.WriteString(" (the step's connection)")
		}
		fmt.Fprintf(&b, ": %s", s.state)
		if s.waitType != "" && s.waitType != "Client" { // an idle session waits on its client
			fmt.Fprintf(&b, ", waiting on %s/%s", s.waitType, s.wait)
		}
		if s.by != "{}" {
			fmt.Fprintf(&b, ", blocked by pid %s", strings.Trim(s.by, "{}"))
		}
		if q := text.OneLine(s.q); q != "" {
			verb := "last query"
			if s.state == "active" {
				verb = "running"
			}
			fmt.Fprintf(&b, "; %s: %s", verb, q)
		}
	}
	return b.String()
}
