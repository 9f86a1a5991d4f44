package points_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	twiceriver "github.com/runtwice/twice/adapters/river"
	"github.com/runtwice/twice/adapters/river/example/points"
	"github.com/runtwice/twice/harness"
)

// BenchmarkDefaultMatrix is the cost of River's bookkeeping in a check:
// each iteration checks the reward worker's default matrix through the
// River adapter, then the same transaction as a plain handler on the
// same schema without River, then the plain handler on the same schema
// with River's tables migrated in but unused (what River's schema costs
// the harness's clone, reset and snapshot alone), and reports the ms per
// scenario of each and the ratios, all from one run. A River scenario
// holds more deliveries than a plain one (River retries a failed job and
// rescues a stuck one, where the harness's own queue retries once):
// deliveries/scenario counts them, and river/plain-per-delivery is the
// ratio of the time per delivery.
//
//	cd adapters/river && go test -run '^$' -bench DefaultMatrix -benchtime 3x -count 5 ./example/points/
func BenchmarkDefaultMatrix(b *testing.B) {
	viaRiver := twiceriver.Job("reward", points.RewardArgs{OrderID: 9812}, reward(points.NoGuard, false))
	plain := harness.Job{Name: "reward-plain", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `
				UPDATE accounts SET points = accounts.points + o.points
				FROM orders o WHERE o.id = $1 AND accounts.id = o.account_id`, int64(9812))
			return err
		})
	}}
	withRiverTables := harness.Config{Setup: []harness.Setup{harness.Func(migrateRiver), harness.SQL(points.Schema)}}
	var q, p, t side
	for b.Loop() {
		q.check(b, viaRiver, cfg)
		p.check(b, plain, harness.Config{Setup: []harness.Setup{harness.SQL(points.Schema)}})
		t.check(b, plain, withRiverTables)
	}
	q.report(b, "river")
	p.report(b, "plain")
	t.report(b, "plain+rivertables")
	b.ReportMetric(q.perScenario()/p.perScenario(), "river/plain")
	b.ReportMetric(q.perDelivery()/p.perDelivery(), "river/plain-per-delivery")
	b.ReportMetric(t.perScenario()/p.perScenario(), "plain+rivertables/plain")
}

// migrateRiver migrates River's schema up, as the adapter's Schema does.
func migrateRiver(ctx context.Context, conn *pgx.Conn) error {
	pool, err := pgxpool.New(ctx, conn.Config().ConnString())
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

// side sums the checks of one side of a benchmark.
type side struct {
	took      time.Duration
	scenarios int
	// handled counts the scenarios' deliveries the queue made (a River
	// scenario's own retries and rescues included), so that the time of
	// each side can be compared per handler call too.
	handled int
}

func (s *side) check(b *testing.B, job harness.Job, c harness.Config) {
	b.Helper()
	start := time.Now()
	res, err := harness.Run(context.Background(), job, c)
	s.took += time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	s.scenarios += len(res.Scenarios)
	for _, sc := range res.Scenarios {
		for _, d := range sc.Deliveries {
			if d.NotDelivered == "" {
				s.handled++
			}
		}
	}
	_ = res.DropDatabases(context.Background())
}

func (s *side) perScenario() float64 {
	return float64(s.took.Microseconds()) / 1000 / float64(max(s.scenarios, 1))
}

// perDelivery is the time per delivery the scenarios made.
func (s *side) perDelivery() float64 {
	return float64(s.took.Microseconds()) / 1000 / float64(max(s.handled, 1))
}

func (s *side) report(b *testing.B, name string) {
	b.ReportMetric(s.perScenario(), name+"-ms/scenario")
	b.ReportMetric(float64(s.handled)/float64(max(s.scenarios, 1)), name+"-deliveries/scenario")
	b.ReportMetric(float64(s.scenarios)/float64(b.N), name+"-scenarios/check")
}

var _ river.Worker[points.RewardArgs] = (*points.RewardWorker)(nil)
