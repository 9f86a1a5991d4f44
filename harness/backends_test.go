package harness_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

// A delivery that returned leaves its server backend to the scenario's
// next delivery; so does a worker that crashed between round trips, its
// session rolled back and reset first: the next delivery finds none of
// the session advisory lock the first one took.
func TestDeliveriesShareBackends(t *testing.T) {
	for _, fault := range []faults.Fault{faults.RunTwice(), faults.CrashBeforeAck()} {
		t.Run(string(fault.Name()), func(t *testing.T) {
			// Which backend a delivery gets back is timing where its pool
			// closes its connections as the delivery ends (a Terminate
			// races the release): a shared backend must show in one of a
			// few checks.
			var last string
			for range 5 {
				same, what := checkSharesBackend(t, fault)
				if same {
					return
				}
				last = what
			}
			t.Errorf("%s; want the same backend", last)
		})
	}
}

// checkSharesBackend checks a job under fault alone and reports whether
// its scenario's two deliveries ran on one server backend.
func checkSharesBackend(t *testing.T, fault faults.Fault) (bool, string) {
	t.Helper()
	type call struct {
		attempt int
		pid     uint32
	}
	var (
		mu    sync.Mutex
		calls []call
	)
	job := harness.Job{Name: "backend-pid", Handler: func(ctx context.Context, d *harness.Delivery) error {
		var pid uint32
		var locks int
		if err := d.DB.QueryRow(ctx, "SELECT pg_backend_pid(), (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())").Scan(&pid, &locks); err != nil {
			return err
		}
		if locks != 0 {
			t.Errorf("attempt %d found %d advisory locks an earlier delivery took", d.Attempt, locks)
		}
		if _, err := d.DB.Exec(ctx, "SELECT pg_advisory_lock(7)"); err != nil {
			return err
		}
		mu.Lock()
		calls = append(calls, call{d.Attempt, pid})
		mu.Unlock()
		return nil
	}}
	t.Setenv(harness.ParallelEnv, "1")
	res, err := harness.Run(t.Context(), job, harness.Config{
		Setup:        []harness.Setup{harness.SQL(`CREATE TABLE t (id int)`)},
		Faults:       []faults.Fault{fault},
		ExpectNoWork: "it reads its backend and takes a session lock",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	// The clean runs come first; the scenario's two deliveries last.
	if len(calls) != 4 || calls[2].attempt != 1 || calls[3].attempt != 2 {
		t.Fatalf("the handler ran as %+v, want two clean runs, then attempts 1 and 2", calls)
	}
	return calls[2].pid == calls[3].pid, fmt.Sprintf("attempt 1 ran on backend %d, attempt 2 on %d", calls[2].pid, calls[3].pid)
}

// The backends deliveries give back outlive their scenario: with one
// scenario at a time and no worker crashing, the clean runs and the
// scenarios' deliveries reuse them, through the resets of the database
// in between, and each still starts from a clean database.
func TestBackendsOutliveTheScenario(t *testing.T) {
	// Whether a delivery gets the backend back is timing where its pool
	// closes as it ends (see TestDeliveriesShareBackendsUnlessCrashed):
	// reuse across scenarios must show in one of a few checks.
	var last string
	for range 3 {
		most, what := mostUsesOfABackend(t)
		if most >= 3 {
			return
		}
		last = what
	}
	t.Errorf("%s: none served more than one scenario", last)
}

// mostUsesOfABackend checks a job under three sequential faults, one
// scenario at a time, and returns how many deliveries the busiest backend
// served. Within a scenario a backend serves at most its two deliveries,
// and a clean run has one: three or more means more than one scenario.
func mostUsesOfABackend(t *testing.T) (int, string) {
	t.Helper()
	var (
		mu   sync.Mutex
		pids = map[uint32]int{}
	)
	job := harness.Job{Name: "backend-pid", Handler: func(ctx context.Context, d *harness.Delivery) error {
		var pid uint32
		if err := d.DB.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return err
		}
		mu.Lock()
		pids[pid]++
		mu.Unlock()
		_, err := d.DB.Exec(ctx, "INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING")
		return err
	}}
	t.Setenv(harness.ParallelEnv, "1")
	res, err := harness.Run(t.Context(), job, harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE t (id int PRIMARY KEY)`)},
		Faults: []faults.Fault{faults.RunTwice(), faults.ProducerRetry(), faults.LostAck()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	if !res.Idempotent() {
		t.Fatalf("a reused backend left the database dirty:\n%s", res)
	}
	calls, most := 0, 0
	for _, n := range pids {
		calls += n
		most = max(most, n)
	}
	if calls < 8 {
		t.Fatalf("the handler ran %d times, want the 2 clean runs and 2 deliveries in each of 3 scenarios", calls)
	}
	return most, fmt.Sprintf("%d deliveries ran on backends %v", calls, pids)
}

// The backends outlive the check too: the next check of a job with the
// same setup gets the template's databases back, reset in place, and
// with them the backends the last check's deliveries gave back, which
// start clean: no temporary table, setting or advisory lock of the last
// check is left on them.
func TestBackendsOutliveTheCheck(t *testing.T) {
	var last string
	for range 3 {
		first, _ := backendsOfACheck(t)
		second, leftovers := backendsOfACheck(t)
		if len(leftovers) > 0 {
			t.Fatalf("a backend kept from the last check still had %v", leftovers)
		}
		for pid := range second {
			if first[pid] {
				return
			}
		}
		last = fmt.Sprintf("the first check ran on backends %v, the second on %v", first, second)
	}
	t.Errorf("%s: no backend served both", last)
}

// backendsOfACheck checks a job that leaves a temporary table, a setting
// and an advisory lock on its session, one scenario at a time, and
// returns the backends its deliveries ran on, and what any of them found
// left on its session when it started.
func backendsOfACheck(t *testing.T) (pids map[uint32]bool, leftovers []string) {
	t.Helper()
	var mu sync.Mutex
	pids = map[uint32]bool{}
	job := harness.Job{Name: "backend-state", Handler: func(ctx context.Context, d *harness.Delivery) error {
		var pid uint32
		var temps, locks int
		var setting string
		if err := d.DB.QueryRow(ctx, `SELECT pg_backend_pid(),
			(SELECT count(*) FROM pg_class WHERE relpersistence = 't'),
			(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()),
			coalesce(current_setting('twice_test.kept', true), '')`).Scan(&pid, &temps, &locks, &setting); err != nil {
			return err
		}
		mu.Lock()
		pids[pid] = true
		if temps != 0 || locks != 0 || setting != "" {
			leftovers = append(leftovers, fmt.Sprintf("backend %d: %d temporary tables, %d advisory locks, setting %q", pid, temps, locks, setting))
		}
		mu.Unlock()
		_, err := d.DB.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS scratch (id int);
			SET twice_test.kept = 'yes';
			SELECT pg_advisory_lock(7);
			INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING`)
		return err
	}}
	t.Setenv(harness.ParallelEnv, "1")
	res, err := harness.Run(t.Context(), job, harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE t (id int PRIMARY KEY) -- backends outlive the check`)},
		Faults: []faults.Fault{faults.RunTwice(), faults.ProducerRetry()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	if !res.Idempotent() {
		t.Fatalf("a reused backend left the database dirty:\n%s", res)
	}
	return pids, leftovers
}
