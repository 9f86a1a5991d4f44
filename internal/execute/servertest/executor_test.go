package servertest_test

// The executor's tests that need a server: see the package doc.

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/execute"
	"github.com/runtwice/twice/internal/freshdb"
	"github.com/runtwice/twice/internal/pgserver"
)

// clock is the scenario's time, as the harness keeps it.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestRunWithoutHarness runs a crash mid-job through the executor alone:
// what a delivery gets (Env) and what the execution did (Output) are the
// whole interface, and the NewWorker hook is the only way in for the
// handler.
func TestRunWithoutHarness(t *testing.T) {
	start := time.Date(2026, time.January, 1, 9, 0, 0, 0, time.UTC)
	r := runVisits(t, start)
	if r.workers != 2 || len(r.envs) != 2 {
		t.Fatalf("workers = %d, deliveries = %d, want 2 and 2", r.workers, len(r.envs))
	}
	checkEnvs(t, r, start)
	checkCrashOutput(t, r.out)
	snap, err := r.out.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Tables) != 1 || len(snap.Tables[0].Rows) != 3 {
		t.Errorf("snapshot = %+v, want 3 rows in visits: the crashed delivery's first autocommit insert stays", snap.Tables)
	}
}

// visitsRun is what runVisits saw: the workers made, each delivery's Env
// and the clock it saw, and the execution's Output.
type visitsRun struct {
	workers int
	envs    []execute.Env
	seen    []time.Time
	out     *execute.Output
}

// runVisits runs, through the executor alone, a job inserting two visits
// crashed before its second step and redelivered 30 s later.
func runVisits(t *testing.T, start time.Time) *visitsRun {
	t.Helper()
	ctx := t.Context()
	srv, tmpl := visitsTemplate(t, "CREATE TABLE visits (job text, attempt int)")
	x := execute.New(execute.Settings{Job: execute.Job{Name: "visit"}, Server: srv,
		DeliveryTimeout: 30 * time.Second})
	t.Cleanup(func() { x.Close(context.Background()) })
	db, err := tmpl.Fresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := x.GiveBack(context.Background(), db); err != nil {
			t.Error(err)
		}
	})
	clk := &clock{now: start}
	var mu sync.Mutex
	r := &visitsRun{}
	sched := faults.Schedule{Deliveries: []faults.Scheduled{
		{Job: 1, Attempt: 1, Worker: 1, Fault: faults.KindCrash, At: 2},
		{Job: 1, Attempt: 2, Worker: 2, Advance: 30 * time.Second},
	}}
	r.out, err = x.Run(ctx, execute.Input{Schedule: sched, DB: db, Clock: clk, NewWorker: func() (execute.Handler, error) {
		mu.Lock()
		r.workers++
		mu.Unlock()
		return func(ctx context.Context, env execute.Env) error {
			mu.Lock()
			r.envs = append(r.envs, env)
			r.seen = append(r.seen, clk.Now())
			mu.Unlock()
			for range 2 {
				if _, err := env.DB.Exec(ctx, "INSERT INTO visits VALUES ($1, $2)", env.JobID, env.Attempt); err != nil {
					return err
				}
			}
			return nil
		}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkEnvs checks what each delivery got: its kind, attempt, every Env
// field, and the harness clock.
func checkEnvs(t *testing.T, r *visitsRun, start time.Time) {
	t.Helper()
	for i, want := range []struct {
		kind    queue.DeliveryKind
		attempt int
		at      time.Time
	}{{queue.DeliveryFirst, 1, start}, {queue.DeliveryRedelivery, 2, start.Add(30 * time.Second)}} {
		if e := r.envs[i]; e.Kind != want.kind || e.Attempt != want.attempt || e.JobID == "" || e.DSN == "" || e.SQL == nil || e.Effects == nil {
			t.Errorf("delivery %d got Env{Kind: %q, Attempt: %d, JobID: %q, DSN: %q}, want kind %q, attempt %d and every field set",
				i+1, e.Kind, e.Attempt, e.JobID, e.DSN, want.kind, want.attempt)
		}
		if !r.seen[i].Equal(want.at) {
			t.Errorf("delivery %d saw the clock at %v, want %v", i+1, r.seen[i], want.at)
		}
	}
}

// checkCrashOutput checks the Output of the crash before step 2 and the
// redelivery that completed.
func checkCrashOutput(t *testing.T, out *execute.Output) {
	t.Helper()
	if n := len(out.Deliveries); n != 2 {
		t.Fatalf("len(Output.Deliveries) = %d, want 2", n)
	}
	if f := out.Deliveries[0].Fault; !strings.Contains(f, "crashed before step 2") {
		t.Errorf("Deliveries[0].Fault = %q, want the crash before step 2", f)
	}
	if got := len(out.Deliveries[0].Completed()); got != 1 {
		t.Errorf("the crashed delivery completed %d steps, want 1", got)
	}
	if f := out.Deliveries[0].Faulted(); f == nil || f.Fate != result.CrashedBefore || len(out.Deliveries[0].Steps) != 2 {
		t.Errorf("the crashed delivery's steps = %+v, want 2 granted, the second crashed before", out.Deliveries[0].Steps)
	}
	if got := len(out.Deliveries[1].Completed()); got != 2 || out.Deliveries[1].Err != "" {
		t.Errorf("the redelivery completed %d steps with error %q, want 2 and none", got, out.Deliveries[1].Err)
	}
	if !out.Faulted["j1a1w1"] || out.Overlapped || out.CleanFailure != "" || len(out.Incomplete) != 0 || out.JobStart != 0 {
		t.Errorf("Output = {Faulted: %v, Overlapped: %v, CleanFailure: %q, Incomplete: %q, JobStart: %v}, want j1a1w1 faulted and nothing else",
			out.Faulted, out.Overlapped, out.CleanFailure, out.Incomplete, out.JobStart)
	}
}

// visitsTemplate is the shared server and a template whose schema is
// schema (a table of visits): the fixture of this package's tests.
func visitsTemplate(t *testing.T, schema string) (*pgserver.Server, *freshdb.Template) {
	t.Helper()
	srv, err := pgserver.Shared(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := freshdb.Prepare(t.Context(), srv, []freshdb.Step{{Name: "schema", SQL: schema}})
	if err != nil {
		t.Fatal(err)
	}
	return srv, tmpl
}
