package queuetest

import (
	"context"
	"testing"
	"time"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

// Bench is the cost of the queue's bookkeeping in a check: each iteration
// checks the suite's set-points job under four faults through the queue,
// then the same statement as a plain handler without one, and reports
// the ms per scenario of each, the scenarios per check and their ratio,
// from one run. Call it from the adapter's BenchmarkCheck and compare runs
// with benchstat:
//
//	go test -run '^$' -bench Check -benchtime 3x -count 5 .
func Bench(b *testing.B, newJob NewJob) {
	b.Helper()
	cfg := harness.Config{Setup: setup,
		Faults: []faults.Fault{faults.RunTwice(), faults.ProducerRetry(), faults.CrashBeforeAck(), faults.CrashAtEveryStep()}}
	job := newJob("queuetest-bench", set)
	plain := harness.Job{Name: "queuetest-bench-plain", Handler: set}
	var q, p benchSide
	for b.Loop() {
		q.check(b, job, cfg)
		p.check(b, plain, cfg)
	}
	q.report(b, "queue")
	p.report(b, "plain")
	b.ReportMetric(q.perScenario()/p.perScenario(), "queue/plain")
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
	if err != nil {
		fatalf(b, "queuetest: %s: %v", job.Name, err)
	}
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
