package twicewatermill_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	twicewatermill "github.com/runtwice/twice/adapters/watermill"
	"github.com/runtwice/twice/harness"
)

// BenchmarkCheck is the cost of Watermill's bookkeeping in a check: each
// iteration checks the set-points handler under three faults on the
// modelled broker and on watermill-sql, then the same statement as a
// plain handler without Watermill, and reports the ms per scenario of
// each and the ratios, from one run:
//
//	cd adapters/watermill && go test -run '^$' -bench Check -benchtime 3x -count 5 .
func BenchmarkCheck(b *testing.B) {
	broker := twicewatermill.Job("set-points", []byte(`{"account":7}`), nil, setPoints)
	sql := twicewatermill.Job("set-points-sql", []byte(`{"account":7}`), nil, setPoints, twicewatermill.SQL("bench_topic", "points"))
	plain := harness.Job{Name: "set-points-plain", Handler: func(ctx context.Context, d *harness.Delivery) error {
		_, err := d.DB.Exec(ctx, `UPDATE accounts SET points = 50 WHERE id = 7`)
		return err
	}}
	var m, s, p benchSide
	for b.Loop() {
		m.check(b, broker, accounts)
		s.check(b, sql, accounts)
		p.check(b, plain, accounts)
	}
	m.report(b, "broker")
	s.report(b, "sql")
	p.report(b, "plain")
	b.ReportMetric(m.perScenario()/p.perScenario(), "broker/plain")
	b.ReportMetric(s.perScenario()/p.perScenario(), "sql/plain")
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
