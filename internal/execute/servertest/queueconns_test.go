package servertest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/internal/execute"
	"github.com/runtwice/twice/internal/freshdb"
)

// pidQueue hands out one job and notes the server backend of the
// harness's connection at each Enqueue; with leaveTx its Ack leaves a
// transaction open on the connection, which the Queue contract forbids.
type pidQueue struct {
	leaveTx bool
	mu      sync.Mutex
	pids    []uint32
}

func (q *pidQueue) Schema() queue.Schema { return queue.Schema{} }
func (q *pidQueue) Rules() queue.Rules   { return queue.Rules{} }

func (q *pidQueue) Enqueue(ctx context.Context, op queue.Op) (queue.Enqueued, error) {
	var pid uint32
	if err := op.Conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return queue.Enqueued{}, err
	}
	q.mu.Lock()
	q.pids = append(q.pids, pid)
	q.mu.Unlock()
	return queue.Enqueued{JobID: "1"}, nil
}

func (q *pidQueue) Fetch(context.Context, queue.Op) (queue.Fetched, error) {
	return queue.Fetched{Delivered: true, Attempt: 1}, nil
}

func (q *pidQueue) Ack(ctx context.Context, op queue.Op) (queue.Settled, error) {
	if q.leaveTx {
		if _, err := op.Conn.Exec(ctx, "BEGIN"); err != nil {
			return queue.Settled{}, err
		}
	}
	return queue.Settled{Outcome: queue.Completed}, nil
}

func (q *pidQueue) Nack(context.Context, queue.Op, error) (queue.Settled, error) {
	return queue.Settled{Outcome: queue.Retry}, nil
}

// TestQueueConnOutlivesTheReset runs one schedule twice on one database,
// given back and reset between: the queue's operations run on the same
// server backend both times (warm, its prepared statements kept), unless
// the first execution left a transaction open on it.
func TestQueueConnOutlivesTheReset(t *testing.T) {
	srv, tmpl := visitsTemplate(t, "CREATE TABLE visits (job text)")
	for _, tc := range []struct {
		name     string
		leaveTx  bool
		samePIDs bool
	}{
		{name: "idle connection kept", samePIDs: true},
		{name: "connection left in a transaction closed", leaveTx: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &pidQueue{leaveTx: tc.leaveTx}
			x := execute.New(execute.Settings{Job: execute.Job{Name: "visit", Queue: q}, Server: srv,
				DeliveryTimeout: 30 * time.Second, Rules: q.Rules()})
			t.Cleanup(func() { x.Close(context.Background()) })
			var names []string
			for range 2 {
				names = append(names, visitOnce(t, x, tmpl))
			}
			if names[0] != names[1] {
				t.Fatalf("the second execution ran on database %s, want %s again (reset in place)", names[1], names[0])
			}
			if len(q.pids) != 2 {
				t.Fatalf("Enqueue ran %d times, want 2", len(q.pids))
			}
			if same := q.pids[0] == q.pids[1]; same != tc.samePIDs {
				t.Errorf("the queue's backends = %v; same = %v, want %v", q.pids, same, tc.samePIDs)
			}
		})
	}
}

// TestQueueConnOutlivesTheCheck runs one schedule in two checks, one
// after the other, on the database the template hands out again: the
// second check's queue operations run on the backend the first one's
// did, parked with the database when the first check's Executor closed.
func TestQueueConnOutlivesTheCheck(t *testing.T) {
	srv, tmpl := visitsTemplate(t, "CREATE TABLE visits (job text) -- a check after another")
	q := &pidQueue{}
	var names []string
	for range 2 {
		x := execute.New(execute.Settings{Job: execute.Job{Name: "visit", Queue: q}, Server: srv,
			DeliveryTimeout: 30 * time.Second, Rules: q.Rules()})
		names = append(names, visitOnce(t, x, tmpl))
		x.Close(context.Background())
	}
	if names[0] != names[1] {
		t.Fatalf("the second check ran on database %s, want %s again (reset in place)", names[1], names[0])
	}
	if len(q.pids) != 2 || q.pids[0] != q.pids[1] {
		t.Errorf("the queue's backends in the two checks = %v, want one backend twice", q.pids)
	}
}

// visitOnce runs one delivery of the visit job on a database from tmpl,
// with x, gives the database back and returns its name.
func visitOnce(t *testing.T, x *execute.Executor, tmpl *freshdb.Template) string {
	t.Helper()
	db, err := tmpl.Fresh(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_, err = x.Run(t.Context(), execute.Input{
		Schedule: faults.Schedule{Deliveries: []faults.Scheduled{{Job: 1, Attempt: 1, Worker: 1}}},
		DB:       db, Clock: &clock{now: time.Date(2026, time.January, 1, 9, 0, 0, 0, time.UTC)},
		NewWorker: func() (execute.Handler, error) {
			return func(ctx context.Context, env execute.Env) error {
				return pgx.BeginFunc(ctx, env.DB, func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "INSERT INTO visits VALUES ($1)", env.JobID)
					return err
				})
			}, nil
		}})
	if gerr := x.GiveBack(context.Background(), db); gerr != nil {
		t.Fatal(gerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	return db.Name
}
