package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	twicenats "github.com/runtwice/twice/adapters/nats"
	"github.com/runtwice/twice/adapters/nats/example/ledger"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

// plainInbox is Inbox's work as a plain twice handler, with no queue: the
// baseline a JetStream scenario is measured against.
func plainInbox(ctx context.Context, d *harness.Delivery) error {
	return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO inbox (message_id) VALUES ($1) ON CONFLICT DO NOTHING`, "credit-9812")
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE accounts SET balance = balance + $2 WHERE id = $1`, 7, 50)
		return err
	})
}

// BenchmarkJetStreamScenario runs, in one benchmark, checks of one
// crash-before-ack scenario of the Inbox consumer through the embedded
// nats-server and of the same work as a plain handler, and reports each
// one's wall time per scenario (its check: two clean runs and the
// scenario) and their ratio:
//
//	TWICE_POSTGRES=local go test -run '^$' -bench JetStreamScenario -benchtime 20x ./example/ledger
func BenchmarkJetStreamScenario(b *testing.B) {
	c := cfg
	c.Faults = []faults.Fault{faults.CrashBeforeAck()}
	jobs := []harness.Job{
		twicenats.Job("credit-inbox", spec(ledger.Consumer), inbox),
		{Name: "credit-plain", Handler: plainInbox},
	}
	// Start PostgreSQL and the embedded nats-server, and build the
	// template, before anything is timed.
	for _, job := range jobs {
		res, err := harness.Run(context.Background(), job, c)
		if err != nil {
			b.Fatal(err)
		}
		_ = res.DropDatabases(context.Background())
	}
	var took [2]time.Duration
	var scenarios [2]int
	for b.Loop() {
		for i, job := range jobs {
			start := time.Now()
			res, err := harness.Run(context.Background(), job, c)
			took[i] += time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			if !res.Idempotent() {
				b.Fatalf("%s", res)
			}
			scenarios[i] += len(res.Scenarios)
			_ = res.DropDatabases(context.Background())
		}
	}
	js := float64(took[0].Nanoseconds()) / float64(scenarios[0])
	plain := float64(took[1].Nanoseconds()) / float64(scenarios[1])
	b.ReportMetric(js/1e6, "jetstream-ms/scenario")
	b.ReportMetric(plain/1e6, "plain-ms/scenario")
	b.ReportMetric(js/plain, "jetstream/plain")
}
