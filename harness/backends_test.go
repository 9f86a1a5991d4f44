package harness_test

import (
	"context"
	"sync"
	"testing"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

// A delivery that returned leaves its server backend to the scenario's
// next delivery; a worker that crashed takes its backend with it.
func TestDeliveriesShareBackendsUnlessCrashed(t *testing.T) {
	for _, tc := range []struct {
		fault faults.Fault
		same  bool
	}{
		{faults.RunTwice(), true},
		{faults.CrashBeforeAck(), false},
	} {
		t.Run(string(tc.fault.Name()), func(t *testing.T) {
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
				if err := d.DB.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					return err
				}
				mu.Lock()
				calls = append(calls, call{d.Attempt, pid})
				mu.Unlock()
				return nil
			}}
			res, err := harness.Run(t.Context(), job, harness.Config{
				Setup:    []harness.Setup{harness.SQL(`CREATE TABLE t (id int)`)},
				Faults:   []faults.Fault{tc.fault},
				Parallel: 1,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
			// The clean runs come first, each on a database of its own;
			// the scenario's two deliveries last.
			if len(calls) != 4 || calls[2].attempt != 1 || calls[3].attempt != 2 {
				t.Fatalf("the handler ran as %+v, want two clean runs, then attempts 1 and 2", calls)
			}
			if same := calls[2].pid == calls[3].pid; same != tc.same {
				t.Errorf("attempt 1 ran on backend %d, attempt 2 on %d; same = %v, want %v", calls[2].pid, calls[3].pid, same, tc.same)
			}
		})
	}
}

// The backends deliveries give back outlive their scenario: with one
// scenario at a time and no worker crashing, the clean runs and the
// scenarios' deliveries reuse them, through the resets of the database
// in between, and each still starts from a clean database.
func TestBackendsOutliveTheScenario(t *testing.T) {
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
	res, err := harness.Run(t.Context(), job, harness.Config{
		Setup:    []harness.Setup{harness.SQL(`CREATE TABLE t (id int PRIMARY KEY)`)},
		Faults:   []faults.Fault{faults.RunTwice(), faults.ProducerRetry(), faults.LostAck()},
		Parallel: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	if !res.Idempotent() {
		t.Fatalf("a reused backend left the database dirty:\n%s", res)
	}
	calls := 0
	for _, n := range pids {
		calls += n
	}
	if calls < 8 {
		t.Fatalf("the handler ran %d times, want the 2 clean runs and 2 deliveries in each of 3 scenarios", calls)
	}
	// Within a scenario a backend serves at most its two deliveries, and
	// a clean run has one: a backend that served three or more served
	// more than one scenario. (Whether every delivery gets the same one
	// is timing: a connection busy when its delivery ends is cut.)
	most := 0
	for _, n := range pids {
		most = max(most, n)
	}
	if most < 3 {
		t.Errorf("%d deliveries ran on backends %v: none served more than one scenario", calls, pids)
	}
}
