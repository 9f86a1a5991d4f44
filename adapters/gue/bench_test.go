package twicegue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/harness"
)

// BenchmarkCheck is the cost of gue's bookkeeping in a check: each
// iteration checks the set-points job under four faults through gue, then
// the same statement in a transaction as a plain handler without gue, and
// reports the ms per scenario of each and their ratio, from one run:
//
//	cd adapters/gue && go test -run '^$' -bench Check -benchtime 3x -count 5 .
func BenchmarkCheck(b *testing.B) {
	plain := harness.Job{Name: "set-points-plain", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE accounts SET points = 50 WHERE id = $1`, int64(7))
			return err
		})
	}}
	var q, p benchSide
	for b.Loop() {
		q.check(b, setJob(), accounts)
		p.check(b, plain, accounts)
	}
	q.report(b, "gue")
	p.report(b, "plain")
	b.ReportMetric(q.perScenario()/p.perScenario(), "gue/plain")
}

// benchSide sums the checks of one side of a benchmark.
type benchSide struct {
	took      time.Duration
	scenarios int
}

func (s *benchSide) check(b *testing.B, job harness.Job, c harness.Config) {
	b.Helper()
	start := time.Now()
	res, err := harness.Run(b.Context(), job, c)
	s.took += time.Since(start)
	require.NoError(b, err)
	s.scenarios += len(res.Scenarios)
	_ = res.DropDatabases(context.Background())
}

func (s *benchSide) perScenario() float64 {
	return float64(s.took.Microseconds()) / 1000 / float64(max(s.scenarios, 1))
}

func (s *benchSide) report(b *testing.B, name string) {
	b.ReportMetric(s.perScenario(), name+"-ms/scenario")
	b.ReportMetric(float64(s.scenarios)/float64(b.N), name+"-scenarios/check")
}
