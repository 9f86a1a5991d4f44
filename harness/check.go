package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/execute"
	"github.com/runtwice/twice/internal/record"
	"github.com/runtwice/twice/internal/render"
	"github.com/runtwice/twice/internal/text"
)

// Check runs Run and turns its outcome into test failures: one error that
// gathers every finding, or a fatal error when the check itself could not
// run, labelled "internal" when the fault is twice's own. Databases kept as evidence are dropped when the
// test passes and logged with their connection strings when it fails.
//
// With Config.ExpectFinding set, findings are logged instead, and the test
// fails only if the job turned out idempotent.
func Check(t testing.TB, job Job, cfg Config) *Result {
	t.Helper()
	return check(t, job, cfg)
}

// Run checks job: it runs the job once, cleanly, on two fresh databases to
// learn the reference state and which columns are noise, then executes
// every schedule of cfg's faults on a fresh database of its own and compares
// the outcome with the reference. As one shard of several (ShardEnv) it
// executes only that shard's schedules.
//
// A non-nil error means the check itself could not run (no PostgreSQL, bad
// setup SQL, a job that fails on a clean run); findings about the job are
// in the Result. Databases of failed scenarios are kept as evidence until
// Result.DropDatabases.
func Run(ctx context.Context, job Job, cfg Config) (*Result, error) {
	start := time.Now()
	if cfg.Faults != nil && len(cfg.Faults) == 0 {
		return nil, errNoFaults
	}
	r, res, plan, err := begin(ctx, job, cfg)
	if err != nil {
		return nil, err
	}
	defer r.close(context.WithoutCancel(ctx))
	// Each fault is expanded once: what runs now, and what the
	// reductions left out, to run if what they assumed did not hold.
	var scheds []faults.Schedule
	var expanded []faults.Expansion
	for _, f := range cfg.faults() {
		if cfg.rerunNone != "" {
			break
		}
		e := f.Expand(plan)
		expanded = append(expanded, e)
		scheds = append(scheds, e.Run...)
	}
	if len(scheds) == 0 && cfg.rerunNone == "" {
		why := "a fault that needs a commit point, say, on a job without one"
		if o := plan.Overlap(); o != nil && o.In == 0 {
			why = fmt.Sprintf("visibility-timeout has none where, by Config.StepTimes, the job's steps take %s in all, under the queue's %s", o.Took, o.Timeout)
		}
		return nil, blame.Userf("job %q: Config.Faults gave no scenario for its clean run of %d steps (%s), so nothing would be checked", job.Name, len(plan.Steps), why)
	}
	for _, s := range scheds {
		if err := checkSchedule(job.Name, plan.Steps, s); err != nil {
			return nil, blame.User(err)
		}
		if err := checkRedrive(s, r.visibilityTimeout()); err != nil {
			return nil, blame.User(err)
		}
	}
	if scheds, err = takeShard(ctx, scheds, res); err != nil {
		return nil, err
	}
	if p := progressOf(ctx); p != nil {
		p.total.Store(int64(len(scheds)))
	}
	scs, evidence, err := r.scenarios(ctx, scheds, res)
	if err != nil {
		return nil, err
	}
	for i := range scs {
		scs[i].Index = place(res, i)
	}
	res.Scenarios = scs
	if evidence != nil {
		res.kept = append(res.kept, *evidence)
	}
	if err := r.confirmReductions(ctx, plan, expanded, res); err != nil {
		return nil, errors.Join(err, res.DropDatabases(ctx))
	}
	if err := r.confirm(ctx, res); err != nil {
		return nil, errors.Join(err, res.DropDatabases(ctx))
	}
	if err := checkTookSteps(job.Name, plan.Steps, res.Scenarios); err != nil {
		return nil, blame.User(errors.Join(err, res.DropDatabases(ctx)))
	}
	if err := r.checkWork(res.Scenarios); err != nil {
		return nil, errors.Join(err, res.DropDatabases(ctx))
	}
	res.stragglers = r.x.StillRunning()
	if w := r.x.LeftOpen(); w != nil {
		res.Warnings = append(res.Warnings, *w)
	}
	if w := r.x.ConnectionsLeftOpen(); w != nil {
		res.Warnings = append(res.Warnings, *w)
	}
	if w := r.x.GoroutinesOutlived(); w != nil {
		res.Warnings = append(res.Warnings, *w)
	}
	if w := noStepTaken(len(plan.Steps), res.Scenarios); w != nil {
		res.Warnings = append(res.Warnings, *w)
	}
	if err := unbacked(res, cfg.AcceptWarnings); err != nil {
		return nil, errors.Join(err, res.DropDatabases(ctx))
	}
	res.Duration = time.Since(start)
	res.Outcome = result.OutcomeIdempotent
	switch {
	case res.Idempotent():
	case !res.Confirmed():
		res.Outcome = result.OutcomeFlaky
	case cfg.ExpectFinding != "":
		res.Outcome = result.OutcomeExpectedFinding
	default:
		res.Outcome = result.OutcomeFinding
	}
	return res, nil
}

// tb is the part of testing.TB that check uses, so failure paths can be
// tested with a recording fake.
type tb interface {
	Helper()
	Name() string
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	Failed() bool
	Context() context.Context
}

func check(t tb, job Job, cfg Config) *Result {
	t.Helper()
	cfg, err := withReplay(cfg, t.Name(), job.Name)
	if err != nil {
		fail(t, job, rerunLine(t.Name()), err)
		return nil
	}
	ctx, stop := logProgress(t, job.Name)
	res, err := Run(withTest(ctx, t.Name()), job, cfg)
	stop()
	if err != nil {
		fail(t, job, rerunLine(t.Name()), err)
		return nil
	}
	releaseDatabases(t, res, record.Record{Test: t.Name(), Rerun: rerunLine(t.Name()), Result: &res.Result})
	logStragglers(t, res)
	logLeftOpen(t, res)
	if cfg.rerunNone != "" {
		logf(t, "job %q: none of its schedules failed in %s, so twice report -rerun-failed runs none of them (its clean runs only)", res.Job, cfg.rerunNone)
		return res
	}
	switch res.Outcome {
	case result.OutcomeFinding, result.OutcomeFlaky:
		errorf(t, "%s", render.Finding(&res.Result, rerunLine(t.Name())))
	case result.OutcomeExpectedFinding:
		if shown := patternsShown(res); cfg.ExpectPattern != "" && !slices.Contains(shown, cfg.ExpectPattern) {
			errorf(t, "job %q: the expected finding (%s) shows no %s culprit (Config.ExpectPattern); its culprits show %s:\n%s",
				res.Job, cfg.ExpectFinding, cfg.ExpectPattern, patternList(shown), render.Finding(&res.Result, rerunLine(t.Name())))
			break
		}
		logf(t, "expected finding (%s):\n%s", cfg.ExpectFinding, render.Finding(&res.Result, rerunLine(t.Name())))
	default:
		if cfg.ExpectFinding != "" && res.Shard != nil {
			// Another shard may hold the failing scenarios; the merged
			// report shows the job's verdict.
			logf(t, "job %q is marked not idempotent (%s), and none of the %d scenarios of shard %s differs", res.Job, cfg.ExpectFinding, len(res.Scenarios), res.Shard)
			break
		}
		if cfg.ExpectFinding != "" {
			errorf(t, "job %q is marked not idempotent (%s), but all %d scenarios passed: remove Config.ExpectFinding",
				res.Job, cfg.ExpectFinding, len(res.Scenarios))
			break
		}
		logPassed(t, res)
	}
	return res
}

// fail ends the test with err, the check's own breakage, and tells the
// runner so: its verdict on the job is neither a pass nor a finding.
func fail(t tb, job Job, rerun string, err error) {
	t.Helper()
	outcome := result.OutcomeInternalError
	if blame.IsUser(err) {
		outcome = result.OutcomeUserError
	}
	rec := record.Record{Test: t.Name(), Rerun: rerun, Error: blame.Text(err),
		Result: &result.Result{Job: job.Name, Outcome: outcome}}
	if werr := record.Write(rec); werr != nil {
		t.Errorf("%s", blame.Message(werr))
	}
	t.Fatalf("%s", blame.Message(err))
}

// logf and errorf are how a check speaks through t, and with fail the
// one place harness tags what it says (blame.Line): the tag, then the
// formatted line. An error goes through blame.Message, which adds the
// label of whose fault it is.
func logf(t tb, format string, args ...any) {
	t.Helper()
	t.Logf("%s", blame.Line(format, args...))
}

func errorf(t tb, format string, args ...any) {
	t.Helper()
	t.Errorf("%s", blame.Line(format, args...))
}

// releaseDatabases drops the databases res kept as evidence when the test
// passes, and keeps them, logging how to connect, when it fails; then it
// writes rec, the check's record for the runner. Whether the test fails is
// known only at its end, and keeping renames (and, on a server that dies
// with the binary, dumps) the databases: a record written before would
// name databases that no longer exist. With nothing kept, rec is written
// at once.
func releaseDatabases(t tb, res *Result, rec record.Record) {
	t.Helper()
	if len(res.kept) == 0 {
		if err := record.Write(rec); err != nil {
			t.Errorf("%s", blame.Message(err))
		}
		return
	}
	t.Cleanup(func() {
		// Its lines point at the user's Check or Explore call.
		t.Helper()
		ctx := context.Background()
		if !t.Failed() || !keepEvidence() {
			if err := res.DropDatabases(ctx); err != nil {
				t.Errorf("%s", blame.Message(fmt.Errorf("dropping the databases of failed scenarios: %w", err)))
			}
		} else {
			for _, k := range res.keepDatabases(ctx) {
				logf(t, "%s", k)
			}
		}
		if err := record.Write(rec); err != nil {
			t.Errorf("%s", blame.Message(err))
		}
	})
}

// rerunLine is the go test command that reruns the named test from the
// module root (or the package directory when no go.mod is found); under
// -twice.replay it keeps the schedule, so it reruns what ran, not the
// whole matrix.
func rerunLine(name string) string {
	if s, ok, err := replaySchedule(); err == nil && ok {
		return replayLine(name, s.String())
	}
	return testLine(name)
}

// testLine is the go test command that runs the named test.
func testLine(name string) string {
	return fmt.Sprintf("go test -run '%s' %s", render.TestPattern(name), packageDir())
}

// packageDir is the test's package directory relative to its module root:
// go test runs a package's tests in that directory.
func packageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil || rel == "." {
				return "."
			}
			return "./" + filepath.ToSlash(rel)
		}
		if filepath.Dir(dir) == dir {
			return "."
		}
	}
}

// logStragglers logs res's note about goroutines still running, if any.
func logStragglers(t tb, res *Result) {
	t.Helper()
	if res.stragglers != "" {
		logf(t, "%s", res.stragglers)
	}
}

// replayLine is the command that runs sched alone in the named test.
func replayLine(testName string, sched string) string {
	return fmt.Sprintf("%s -twice.replay='%s'", testLine(testName), sched)
}

// Under go test -v a check says what it did: one line when it passes, and
// a progress line at least every progressEvery while it runs, so a long
// check (a handler hanging on retries) is never silent.

// progressEvery is how often a running check logs its progress under -v.
var progressEvery = 10 * time.Second

// verbose reports whether go test runs with -v; a variable so tests can
// turn it on.
var verbose = testing.Verbose

// logProgress logs, under -v, how far the check of job has come every
// progressEvery, until stop is called. ctx carries the counter Run fills.
func logProgress(t tb, job string) (ctx context.Context, stop func()) {
	ctx = t.Context()
	if !verbose() {
		return ctx, func() {}
	}
	p := &progress{}
	ctx = execute.WithStuck(context.WithValue(ctx, progressKey{}, p), &p.stuck)
	start := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				elapsed := time.Since(start).Round(time.Second)
				waiting := p.stuck.Longest(progressEvery)
				if total := p.total.Load(); total > 0 {
					logf(t, "job %q: %d of %d scenarios done after %s%s", job, p.done.Load(), total, elapsed, waiting)
				} else {
					logf(t, "job %q: still checking after %s: %s%s", job, elapsed, p.doing(), waiting)
				}
			}
		}
	})
	return ctx, func() { close(done); wg.Wait() }
}

// doing is what the check does now, before its scenarios are counted:
// its phase, and the schedules done so far.
func (p *progress) doing() string {
	phase := "starting"
	if ph := p.phase.Load(); ph != nil {
		phase = *ph
	}
	if n := p.done.Load(); n > 0 {
		phase += fmt.Sprintf(", %d %s done so far", n, text.Plural(int(n), "scenario"))
	}
	return phase
}

// logPassed logs, under -v, the one line of a passing check.
// Its line points at the user's Check call, not here.
func logPassed(t tb, res *Result) {
	t.Helper()
	if verbose() {
		logf(t, "ok: job %q: %d scenarios%s, none differs from one clean run (%s)", res.Job, len(res.Scenarios), render.InShard(&res.Result), res.Duration.Round(time.Millisecond))
		for _, line := range reductionLines(res) {
			logf(t, "job %q: %s", res.Job, line)
		}
		if line := overlapLine(res); line != "" {
			logf(t, "job %q: %s", res.Job, line)
		}
		if note := volatileNote(res); note != "" {
			logf(t, "%s", note)
		}
	}
}

// overlapLine says where, by Config.StepTimes, visibility-timeout paused
// the first delivery, or "" when the job's step times were not declared.
func overlapLine(res *Result) string {
	o := res.Overlap
	switch {
	case o == nil:
		return ""
	case o.In == 0:
		return fmt.Sprintf("visibility-timeout: no scenario: by Config.StepTimes the job's steps take %s in all, so it has returned before the queue hands it out again at %s", o.Took, o.Timeout)
	}
	step := fmt.Sprintf("step %d", o.In)
	if o.In <= len(res.Steps) {
		step += fmt.Sprintf(" (%s)", text.OneLine(res.Steps[o.In-1].SQL))
	}
	return fmt.Sprintf("visibility-timeout: by Config.StepTimes the first delivery is in %s, which started at %s, when the queue hands the job out again at %s: it is paused there only, before and after that step", step, o.Started, o.Timeout)
}

// volatileNote is the line a passing check logs under -v about what it
// left out as volatile, or "": a column that differs between two clean
// runs is compared nowhere, so a pass says so every time, and names the
// columns that hold times, which a handler filling them from time.Now()
// instead of d.Now makes volatile.
func volatileNote(res *Result) string {
	left := append(append([]string(nil), res.Volatile...), res.VolatileEffects...)
	if len(left) == 0 {
		return ""
	}
	line := fmt.Sprintf("job %q: left out of every comparison as volatile (they differ between two clean runs): %s", res.Job, strings.Join(left, ", "))
	if times := render.TimeColumns(res.Reference, res.Volatile); len(times) > 0 {
		verb := "holds a time"
		if len(times) > 1 {
			verb = "hold times"
		}
		line += fmt.Sprintf("; %s %s: if the handler takes it from time.Now(), use d.Now, so that a time a redelivery moves is compared", strings.Join(times, ", "), verb)
	}
	return line
}

// logLeftOpen logs the warning of res, if any.
func logLeftOpen(t tb, res *Result) {
	t.Helper()
	for _, w := range res.Warnings {
		logf(t, "%s", render.Warning(res.Job, w))
	}
}

// patternsShown are the patterns res's failing scenarios' culprits show,
// each once, in order.
func patternsShown(res *Result) []result.Pattern {
	var out []result.Pattern
	for _, sc := range res.Failed() {
		for _, c := range sc.Culprits {
			if c.Pattern != "" && !slices.Contains(out, c.Pattern) {
				out = append(out, c.Pattern)
			}
		}
	}
	return out
}

// patternList says which patterns were shown: "key-per-attempt,
// effect-lost" or "none".
func patternList(ps []result.Pattern) string {
	if len(ps) == 0 {
		return "none"
	}
	words := make([]string, len(ps))
	for i, p := range ps {
		words[i] = string(p)
	}
	return strings.Join(words, ", ")
}

// Sample is one job that checks one kind of work a service registers
// (CheckRegistered): a sample of the kind's args, or its producer, with
// the worker production registers for it.
type Sample struct {
	// Kind is the registered kind the job checks: a River job kind, an
	// asynq pattern, a Watermill handler's name. The adapters fill it
	// from the job where the library can tell.
	Kind string
	// Job is the kind's job, built with its queue adapter.
	Job Job
	// ExpectFinding and ExpectPattern are Config's, for this sample
	// alone: a worker known not to be idempotent.
	ExpectFinding string
	ExpectPattern result.Pattern
}

// CheckRegistered checks every kind of work a service registers, so that
// a worker added without a check fails CI instead of passing it unseen:
// it checks each sample's job with Check (in a subtest named by its kind
// when t is a *testing.T), then fails naming every registered kind no
// sample checks and every sample of a kind the registry does not hold
// (which it does not run: production would never work it). kinds are what the registry holds; registry names it, for messages and
// the report's "workers without a check". The adapters read kinds from
// the library's own registry: twiceriver.CheckWorkers,
// twiceasynq.CheckMux, twicewatermill.CheckRouter. The results are the
// samples', in their order; nil for a sample not run or whose check
// could not run.
func CheckRegistered(t testing.TB, registry string, kinds []string, cfg Config, samples ...Sample) []*Result {
	t.Helper()
	cov := coverage(registry, kinds, samples)
	if err := record.Write(record.Record{Test: t.Name(), Rerun: rerunLine(t.Name()), Coverage: &cov}); err != nil {
		t.Errorf("%s", blame.Message(err))
	}
	if len(cov.Kinds) == 0 {
		errorf(t, "the %s holds no kind of work, so checking what it registers would check nothing: pass the registry production builds, with its workers added", registry)
		return nil
	}
	if len(cov.Unchecked) > 0 {
		errorf(t, "the %s registers %d %s that no sample checks: %s; a worker added without a check is not checked at all. Give each a harness.Sample: its job with sample args, as production enqueues them", registry, len(cov.Unchecked), text.Plural(len(cov.Unchecked), "kind"), strings.Join(cov.Unchecked, ", "))
	}
	if len(cov.Unregistered) > 0 {
		errorf(t, "samples check %d %s the %s does not hold: %s; production would not work them. Register their workers, or drop the samples", len(cov.Unregistered), text.Plural(len(cov.Unregistered), "kind"), registry, strings.Join(cov.Unregistered, ", "))
	}
	var out []*Result
	for _, s := range samples {
		if slices.Contains(cov.Unregistered, s.Kind) {
			out = append(out, nil)
			continue
		}
		if s.Kind == "" {
			errorf(t, "a sample job %q names no kind; set harness.Sample.Kind to the %s's kind it checks", s.Job.Name, registry)
			out = append(out, nil)
			continue
		}
		c := cfg
		if s.ExpectFinding != "" {
			c.ExpectFinding, c.ExpectPattern = s.ExpectFinding, s.ExpectPattern
		}
		var res *Result
		if tt, ok := t.(*testing.T); ok {
			tt.Run(s.Kind, func(t *testing.T) { res = check(t, s.Job, c) })
		} else {
			res = check(t, s.Job, c)
		}
		out = append(out, res)
	}
	return out
}

// coverage compares what the registry holds with the samples' kinds.
func coverage(registry string, kinds []string, samples []Sample) result.Coverage {
	cov := result.Coverage{Registry: registry, Kinds: slices.Compact(slices.Sorted(slices.Values(kinds)))}
	sampled := map[string]bool{}
	for _, s := range samples {
		if s.Kind == "" {
			continue
		}
		sampled[s.Kind] = true
		if !slices.Contains(cov.Kinds, s.Kind) && !slices.Contains(cov.Unregistered, s.Kind) {
			cov.Unregistered = append(cov.Unregistered, s.Kind)
		}
	}
	for _, k := range cov.Kinds {
		if !sampled[k] {
			cov.Unchecked = append(cov.Unchecked, k)
		}
	}
	return cov
}
