package harness_test

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/internal/blame"
)

// Delivery.SQL gives each delivery one *sql.DB of its own, whose
// statements are steps, and the harness closes it when the delivery ends.
func TestDeliverySQL(t *testing.T) {
	var (
		mu    sync.Mutex
		dbs   = map[*sql.DB]bool{}
		ended []*harness.Delivery
	)
	job := harness.Job{Name: "increment-database-sql", Handler: func(ctx context.Context, d *harness.Delivery) error {
		db, err := d.SQL()
		if err != nil {
			return err
		}
		again, err := d.SQL()
		if err != nil {
			return err
		}
		if again != db {
			t.Errorf("delivery %s attempt %d: a second Delivery.SQL gave another *sql.DB", d.JobID, d.Attempt)
		}
		mu.Lock()
		dbs[db] = true
		ended = append(ended, d)
		mu.Unlock()
		_, err = db.ExecContext(ctx, `UPDATE customers SET points = points + 50 WHERE id = 77`)
		return err
	}}
	res, err := harness.Run(t.Context(), job, harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE customers (id bigint PRIMARY KEY, points int NOT NULL); INSERT INTO customers VALUES (77, 120);`)},
		Faults: []faults.Fault{faults.RunTwice()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })

	if len(res.Steps) != 1 || !strings.HasPrefix(res.Steps[0].SQL, "UPDATE customers") {
		t.Errorf("the clean run's steps are %v, want the UPDATE sent through database/sql", res.Steps)
	}
	if res.Idempotent() {
		t.Errorf("the increment through database/sql was judged idempotent; its second delivery's UPDATE was not seen")
	}
	// Two clean runs and run-twice's two deliveries, twice: it fails,
	// and runs again to confirm it.
	if len(dbs) != 6 {
		t.Errorf("the deliveries got %d distinct *sql.DB, want one each of 6", len(dbs))
	}
	for _, d := range ended {
		if _, err := d.SQL(); err == nil || !strings.Contains(err.Error(), "after delivery j1a") || !strings.Contains(err.Error(), "ended") {
			t.Errorf("Delivery.SQL after the delivery ended: err = %v, want one saying it ended", err)
		}
	}
	// The close runs in the background (it would wait for a query a
	// stray handler goroutine still runs); give it a generous minute.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for db := range dbs {
		for {
			err := db.PingContext(ctx)
			if err != nil && strings.Contains(err.Error(), "database is closed") {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("a delivery's *sql.DB was not closed after its delivery ended: Ping = %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func TestDeliverySQLNotFromHarness(t *testing.T) {
	_, err := new(harness.Delivery).SQL()
	if err == nil || !strings.Contains(blame.Message(err), "[twice] Delivery.SQL: this Delivery was not made by the harness") {
		t.Errorf("SQL on a Delivery the harness did not make: err = %v", err)
	}
}
