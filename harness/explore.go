package harness

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/record"
	"github.com/runtwice/twice/internal/render"
	"pgregory.net/rapid"
)

// ExploreOptions tunes Explore. The zero value is the default.
type ExploreOptions struct {
	// Checks is how many schedules to draw; zero means 100. The flag
	// -twice.checks (or TWICE_CHECKS) overrides it. One shard of several
	// (ShardEnv) draws its share.
	Checks int
	// Limits bounds every drawn schedule: by default at most 4
	// deliveries (the queue's retry of a job left failed comes on top)
	// carrying at most 2 job IDs.
	Limits faults.Limits
	// Reruns is how many more times a failing schedule runs before it
	// is shrunk, and the shrunk one after; a schedule that does not fail
	// every time is reported as flaky. Zero means 3.
	Reruns int
	// Dir is where failing schedules are saved, one text file each, and
	// replayed from before anything is drawn. Explore uses
	// testdata/twice/<TestName> in the test's package directory when it
	// is empty; ExploreRun with an empty Dir neither reads nor saves.
	Dir string
}

func (o ExploreOptions) reruns() int {
	if o.Reruns > 0 {
		return o.Reruns
	}
	return 3
}

// Exploration is what ExploreRun found.
type Exploration struct {
	// Result holds the references and, in Scenarios, the finding: the
	// minimal failing scenario, or every run of a flaky schedule. It has
	// no scenarios when nothing failed.
	Result *Result
	// Checks is how many schedules were drawn; Executed how many
	// distinct schedules ran on a fresh database (a schedule drawn twice
	// runs once; reruns and saved schedules are not counted).
	Checks, Executed int
	// Replayed lists the saved schedule files run before drawing, and
	// Replay is the -twice.replay schedule when one was given instead,
	// else nil.
	Replayed []string
	Replay   *faults.Schedule
	// Found is the first failing schedule, as drawn or saved; Minimal is
	// the one it was shrunk to. Both are nil when nothing failed.
	Found, Minimal *faults.Schedule
	// FoundAfter is how many schedules had been drawn when Found failed.
	FoundAfter int
	// Seed is rapid's seed for the draws that found the failure, 0 when
	// it came from a saved or replayed schedule. -twice.seed=Seed draws
	// the failing schedules first.
	Seed uint64
	// Flaky marks a schedule that failed on some runs only; Result holds
	// every run.
	Flaky bool
	// SavedTo is the file the minimal schedule was saved to, or empty.
	SavedTo string
	// ReplayLine is the go test command that runs the minimal schedule
	// alone (Explore sets it; ExploreRun knows no test name).
	ReplayLine string
	// Duration is the wall time of the whole exploration.
	Duration time.Duration

	rounds int // rapid checks that drew schedules, shrinking aside
	// deliveries is how many deliveries the executed schedules held;
	// references how many clean runs at a later clock they were
	// compared with (each runs once, on a database of its own).
	deliveries, references int
	// busy is the scenarios' run time summed, drawing the wall time
	// from the first draw to the last schedule's end: busy over drawing
	// times the pool's width is how full the pool was.
	busy, drawing time.Duration
	timed         []timedRun // every executed schedule's
}

// timedRun is how many deliveries an executed schedule held and how long
// its scenario took.
type timedRun struct {
	deliveries int
	took       time.Duration
}

// Failed reports whether exploration found a schedule that failed, every
// time or flakily.
func (x *Exploration) Failed() bool { return x.Minimal != nil }

// Explore checks job with schedules drawn by rapid (faults.Generate)
// rather than a fixed matrix: schedules that stack faults, such as a
// producer copy that crashes and is redelivered. It runs ExploreRun and
// turns its outcome into test failures, as Check does, with one addition:
// the message gives the minimal failing schedule, rapid's seed, and the
// go test line that replays exactly that schedule (-twice.replay).
//
// The minimal schedule is saved under testdata/twice/<TestName>/ in the
// test's package directory, and the next run replays saved schedules
// before it draws new ones; commit them to keep a found bug fixed. No
// schedule is saved when Config.ExpectFinding is set (the bug is known),
// when replaying, or when TWICE_REPORT_DIR is set (the runner keeps the
// schedule in its report instead of writing to the source tree).
//
// With -twice.replay (or TWICE_REPLAY) set, Explore runs exactly that
// schedule instead.
func Explore(t testing.TB, job Job, cfg Config, opts ExploreOptions) *Exploration {
	t.Helper()
	return explore(t, job, cfg, opts)
}

func explore(t tb, job Job, cfg Config, opts ExploreOptions) *Exploration {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = filepath.Join("testdata", "twice", record.SafeName(t.Name()))
	}
	ctx, stop := logProgress(t, job.Name)
	x, err := exploreRun(withTest(ctx, t.Name()), job, cfg, opts, t.Name())
	stop()
	if err != nil {
		fail(t, job, rerunLine(t.Name()), err)
		return nil
	}
	res := x.Result
	line := rerunLine(t.Name())
	if x.Failed() {
		line = replayLine(t.Name(), x.Minimal.String())
		x.ReplayLine = line
	}
	releaseDatabases(t, res, record.Record{Test: t.Name(), Rerun: line, Result: &res.Result})
	logStragglers(t, res)
	switch {
	case res.Outcome == result.OutcomeFlaky || res.Outcome == result.OutcomeFinding:
		errorf(t, "%s", x.message(line))
	case res.Outcome == result.OutcomeExpectedFinding && cfg.ExpectPattern != "" && !slices.Contains(patternsShown(res), cfg.ExpectPattern):
		errorf(t, "job %q: the expected finding (%s) shows no %s culprit (Config.ExpectPattern); its culprits show %s:\n%s",
			res.Job, cfg.ExpectFinding, cfg.ExpectPattern, patternList(patternsShown(res)), x.message(line))
	case res.Outcome == result.OutcomeExpectedFinding:
		logf(t, "expected finding (%s):\n%s", cfg.ExpectFinding, x.message(line))
	case cfg.ExpectFinding != "" && res.Shard != nil:
		logf(t, "job %q is marked not idempotent (%s), and the %d schedules shard %s explored passed", res.Job, cfg.ExpectFinding, x.Checks, res.Shard)
	case cfg.ExpectFinding != "":
		errorf(t, "job %q is marked not idempotent (%s), but all %d schedules explored passed: remove Config.ExpectFinding, or explore further with -twice.checks",
			res.Job, cfg.ExpectFinding, x.Checks)
	default:
		logf(t, "job %q: %d schedules drawn, %d distinct ones run, all idempotent (%v)", res.Job, x.Checks, x.Executed, x.Duration.Round(time.Millisecond))
	}
	return x
}

// ExploreRun is the core of Explore: it runs the job's clean references
// once, replays the schedules saved in opts.Dir, then draws opts.Checks
// schedules with rapid and runs each on a fresh database against the same
// references. Several rapid streams draw at once into one scenario pool
// (one stream when a seed is given, so that it replays). A failing
// schedule is run opts.Reruns more times: when it does not fail every
// time it is reported as flaky, otherwise rapid shrinks it toward fewer
// deliveries, fewer faults and earlier steps, and the shrunk schedule is
// run again as many times.
//
// A non-nil error means the exploration itself could not run; findings
// are in the Exploration. The database of the first of the finding's
// reruns to fail is kept as evidence until Result.DropDatabases, as Run
// keeps its first failing scenario's.
func ExploreRun(ctx context.Context, job Job, cfg Config, opts ExploreOptions) (*Exploration, error) {
	return exploreRun(ctx, job, cfg, opts, job.Name)
}

func exploreRun(ctx context.Context, job Job, cfg Config, opts ExploreOptions, name string) (*Exploration, error) {
	start := time.Now()
	if cfg.Faults != nil {
		// Exploration draws its own schedules: faults named here would be
		// checked and then never run, a pass that covers less than it says.
		return nil, blame.User(fmt.Errorf("job %q: Explore and ExploreRun draw their own schedules and do not run Config.Faults (%d given); leave it nil, and bound what is drawn with ExploreOptions.Limits, or run the faults with Check or Run", job.Name, len(cfg.Faults)))
	}
	if cfg.StepTimes != nil {
		// Drawn overlaps pause the first delivery at any step, which
		// declared times may rule out: a finding there could not happen.
		return nil, blame.User(fmt.Errorf("job %q: Explore and ExploreRun draw overlaps at any step and do not read Config.StepTimes (%d given); leave it nil here, and check the job's timing with Check or Run, whose visibility-timeout fault reads it", job.Name, len(cfg.StepTimes)))
	}
	replay, isReplay, err := replaySchedule()
	if err != nil {
		return nil, err
	}
	// Under twice report -rerun-failed, only the schedules that failed
	// before run again, and none is drawn.
	var rerun []faults.Schedule
	rerunOf := ""
	if test := testOf(ctx); test != "" && !isReplay {
		if rerun, rerunOf, err = rerunSchedules(test, job.Name); err != nil {
			return nil, err
		}
	}
	isRerun := rerunOf != ""
	checks, err := checksSetting()
	if err != nil {
		return nil, err
	}
	if checks == 0 {
		checks = opts.Checks
	}
	if checks <= 0 {
		checks = 100
	}
	saved, err := readSaved(opts.Dir)
	if err != nil {
		return nil, err
	}
	checks, saved, shard, err := exploreShard(checks, saved)
	if err != nil {
		return nil, err
	}
	if err := applySeed(shard); err != nil {
		return nil, err
	}
	r, res, plan, err := begin(ctx, job, cfg)
	if err != nil {
		return nil, err
	}
	res.Shard = shard
	defer r.close(context.WithoutCancel(ctx))

	setPhase(ctx, "exploring schedules")
	e := &explorer{r: r, res: res, plan: plan, opts: opts, name: name, cache: map[string]*outcome{},
		slots: make(chan struct{}, r.parallel())}
	x := &Exploration{Result: res}
	switch {
	case isReplay:
		x.Replay = &replay
		if err = checkSchedule(job.Name, plan.Steps, replay); err == nil && (shard == nil || shard.Has(0)) {
			// A replay is a list of one schedule, dealt to shard 1.
			err = e.fromList(ctx, x, []faults.Schedule{replay})
		}
	case isRerun:
		for _, s := range rerun {
			if err = checkSchedule(job.Name, plan.Steps, s); err != nil {
				break
			}
		}
		if err == nil && len(rerun) > 0 {
			err = e.fromList(ctx, x, rerun)
		}
	case len(saved) > 0:
		for _, s := range saved {
			x.Replayed = append(x.Replayed, s.file)
		}
		err = e.fromList(ctx, x, schedulesOf(saved))
	}
	if err == nil && e.found == nil && !isReplay && !isRerun {
		began := time.Now()
		err = e.explore(ctx, x, checks)
		x.drawing = time.Since(began)
	}
	if err == nil && e.found != nil {
		err = e.conclude(ctx, x)
	}
	x.Executed, x.deliveries = e.executed, e.deliveries
	x.references, x.busy, x.timed = shiftedRuns(r), e.busy, e.timed
	if err != nil {
		return nil, errors.Join(err, res.DropDatabases(context.WithoutCancel(ctx)))
	}
	if x.Failed() && !x.Flaky && !isReplay && !containsSchedule(saved, *x.Minimal) && cfg.ExpectFinding == "" && os.Getenv(record.DirEnv) == "" && opts.Dir != "" {
		if x.SavedTo, err = save(opts.Dir, job.Name, *x.Minimal); err != nil {
			return nil, errors.Join(err, res.DropDatabases(context.WithoutCancel(ctx)))
		}
	}
	if !x.Failed() && !x.Flaky {
		// Nothing drawn failed: a job that did nothing on its clean run
		// passed in silence (runner.checkWork).
		if err := r.checkWork(nil); err != nil {
			return nil, errors.Join(err, res.DropDatabases(context.WithoutCancel(ctx)))
		}
	}
	res.stragglers = r.x.StillRunning()
	x.Duration = time.Since(start)
	res.Duration = x.Duration
	switch {
	case x.Flaky:
		res.Outcome = result.OutcomeFlaky
	case x.Failed() && cfg.ExpectFinding != "":
		res.Outcome = result.OutcomeExpectedFinding
	case x.Failed():
		res.Outcome = result.OutcomeFinding
	default:
		res.Outcome = result.OutcomeIdempotent
	}
	return x, nil
}

// explorer runs drawn schedules against one set of references.
type explorer struct {
	r    *runner
	res  *Result
	plan faults.Plan
	opts ExploreOptions
	name string
	// slots holds a token per running scenario: the streams share the
	// pool's width (-twice.parallel).
	slots chan struct{}

	mu         sync.Mutex          // guards what follows: the streams share it
	cache      map[string]*outcome // by schedule text: a schedule drawn again is not rerun
	executed   int
	deliveries int           // in the executed schedules
	busy       time.Duration // the executed schedules' run time, summed
	timed      []timedRun

	drawn     int
	rounds    int               // rapid checks that drew, shrinking aside
	found     *faults.Schedule  // the first failing schedule
	last      *faults.Schedule  // the last failing schedule the property saw: rapid's minimal
	flakyRuns []result.Scenario // every run of found, when they disagreed
	stop      bool              // the property passes without running anything
	err       error             // breakage met inside the property
}

// batch is the most schedules one rapid check draws; they run in
// parallel. It is fixed, not the machine's core count, so that a seed
// draws the same schedules everywhere. rapid deletes the schedules a
// failure does not need while it shrinks, and the rest are not rerun
// (the cache).
const batch = 16

// streams is how many rapid.Checks draw at once, each from a seed of its
// own, into the one scenario pool. A rapid check waits for its last
// schedule before rapid draws the next, so one stream left the pool
// idle at every check's tail: with batches of 4 (about 2 drawn on
// average) half of a 2-core pool stood idle, and with 16 (about 4.5) a
// schedule still cost 1.6 scenarios. Other streams fill that tail. The
// first stream to fail shrinks alone: the others stop drawing. With a
// seed given (-twice.seed, -rapid.seed) one stream draws, so that the
// seed replays the same schedules.
var streams = 4 // a variable only so BenchmarkExploreVsMatrix can price one stream in the same run

// stream is one rapid.Check's share of an exploration.
type stream struct {
	shrinking bool // this stream found the failure and rapid shrinks it
	drawn     int
}

// fromList runs schedules (saved or replayed) and takes the first that
// fails as the finding, without shrinking it.
func (e *explorer) fromList(ctx context.Context, x *Exploration, scheds []faults.Schedule) error {
	outs, err := e.runAll(ctx, scheds)
	if err != nil {
		return err
	}
	for i, sc := range outs {
		if sc.Verdict != result.Idempotent {
			e.found, e.last = &scheds[i], &scheds[i]
			x.Found = &scheds[i]
			return nil
		}
	}
	return nil
}

// explore draws schedules with rapid, in parallel streams, until checks
// have been drawn or one fails; a failing one is confirmed by reruns and
// shrunk.
func (e *explorer) explore(ctx context.Context, x *Exploration, checks int) error {
	gen := rapid.SliceOfN(faults.Generate(e.plan, e.opts.Limits), 1, batch)
	n := streams
	if seeded() {
		n = 1
	}
	files := rapidFiles()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			st := &stream{}
			for !st.shrinking && !e.done(st, checks) {
				before := st.drawn
				rt := &rapidTB{name: e.name}
				rapid.Check(rt, func(t *rapid.T) { e.property(ctx, t, st, gen, checks, x) })
				if st.drawn == before {
					break
				}
			}
		})
	}
	wg.Wait()
	seed, err := files.takeNew()
	if err != nil {
		return err
	}
	if seed != 0 && e.found != nil {
		x.Seed = seed
	}
	x.Checks, x.rounds = e.drawn, e.rounds
	return e.err
}

// seeded reports whether rapid draws from a seed it was given rather
// than a random one.
func seeded() bool {
	f := flag.Lookup("rapid.seed")
	return f == nil || f.Value.String() != "0"
}

// done reports whether st draws no more: the budget is spent, or
// exploration stopped or found a failure that another stream shrinks.
func (e *explorer) done(st *stream, checks int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stop || (!st.shrinking && (e.found != nil || e.drawn >= checks))
}

// property is rapid's property: the drawn schedules are all idempotent.
// Every failure fails at the same call, so rapid shrinks by it.
func (e *explorer) property(ctx context.Context, t *rapid.T, st *stream, gen *rapid.Generator[[]faults.Schedule], checks int, x *Exploration) {
	if e.done(st, checks) {
		return
	}
	scheds := gen.Draw(t, "schedules")
	if !st.shrinking {
		e.mu.Lock()
		scheds = scheds[:min(len(scheds), checks-e.drawn)]
		e.drawn += len(scheds)
		st.drawn += len(scheds)
		if len(scheds) > 0 {
			e.rounds++
		}
		e.mu.Unlock()
	}
	for i := range scheds {
		scheds[i].Fault = faults.NameExplore
	}
	outs, err := e.runAll(ctx, scheds)
	if err != nil {
		e.fatal(err)
		return
	}
	for i, sc := range outs {
		if sc.Verdict == result.Idempotent {
			continue
		}
		s := scheds[i]
		if !st.shrinking {
			e.mu.Lock()
			first := e.found == nil && !e.stop
			if first {
				st.shrinking = true
				e.found = &s
				x.Found, x.FoundAfter = &s, e.drawn
			}
			e.mu.Unlock()
			if !first {
				return // another stream found one first, and shrinks it
			}
			runs, err := e.rerun(ctx, s, e.opts.reruns())
			if err != nil {
				e.fatal(err)
				return
			}
			if all := append([]result.Scenario{sc}, runs...); flaky(all) {
				// rapid, seeing the failure vanish, does not shrink it.
				e.mu.Lock()
				e.last, e.stop, e.flakyRuns = &s, true, all
				e.mu.Unlock()
				return
			}
		}
		e.mu.Lock()
		e.last = &s
		e.mu.Unlock()
		t.Fatalf("%s", blame.Line("not idempotent"))
	}
}

// fatal stops exploration at the harness's own breakage err; the first
// such error is the one reported.
func (e *explorer) fatal(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err == nil {
		e.err = err
	}
	e.stop = true
}

// conclude runs the last failing schedule opts.Reruns more times, keeps
// the database of a failing run (the pool's evidence), and fills the
// finding into x. A schedule already found flaky before shrinking is not
// run again.
func (e *explorer) conclude(ctx context.Context, x *Exploration) error {
	s := *e.last
	x.Minimal = &s
	runs := e.flakyRuns
	var evidence *kept
	if runs == nil {
		more, ev, err := e.r.scenarios(ctx, repeat(s, e.opts.reruns()), e.res)
		if err != nil {
			return err
		}
		e.mu.Lock()
		runs = append([]result.Scenario{e.cache[s.String()].sc}, more...)
		e.mu.Unlock()
		if ev != nil {
			ev.scenario++ // after the cached run, whose database is gone
			evidence = ev
		}
	}
	x.Flaky = flaky(runs)
	if !x.Flaky {
		// Every run failed alike: the one whose database is kept is the
		// finding.
		at := len(runs) - 1
		if evidence != nil {
			at, evidence.scenario = evidence.scenario, 0
		}
		runs = runs[at : at+1]
	}
	e.res.Scenarios = runs
	if evidence != nil {
		e.res.kept = append(e.res.kept, *evidence)
	}
	return nil
}

// outcome is a schedule's scenario, once done is closed; ok is false
// when its run broke off with the harness's error.
type outcome struct {
	done chan struct{}
	sc   result.Scenario
	ok   bool
}

// runAll runs the schedules not run before, in parallel, and returns
// every schedule's scenario. A schedule another stream is running is
// waited for, not run again.
func (e *explorer) runAll(ctx context.Context, scheds []faults.Schedule) ([]result.Scenario, error) {
	var todo []faults.Schedule
	var mine []*outcome
	all := make([]*outcome, len(scheds))
	e.mu.Lock()
	for i, s := range scheds {
		o := e.cache[s.String()]
		if o == nil {
			o = &outcome{done: make(chan struct{})}
			e.cache[s.String()] = o
			todo = append(todo, s)
			mine = append(mine, o)
		}
		all[i] = o
	}
	e.mu.Unlock()
	outs, err := e.run(ctx, todo)
	e.mu.Lock()
	if err == nil {
		e.executed += len(todo)
	}
	for i, o := range mine {
		if err == nil {
			o.sc, o.ok = outs[i], true
			e.deliveries += len(todo[i].Deliveries)
			e.busy += outs[i].Duration
			e.timed = append(e.timed, timedRun{deliveries: len(todo[i].Deliveries), took: outs[i].Duration})
		}
		close(o.done)
	}
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	out := make([]result.Scenario, len(scheds))
	for i, o := range all {
		select {
		case <-o.done:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		if !o.ok {
			return nil, fmt.Errorf("schedule %s broke off in another stream of the exploration", scheds[i])
		}
		out[i] = o.sc
	}
	return out, nil
}

// rerun runs s n times.
func (e *explorer) rerun(ctx context.Context, s faults.Schedule, n int) ([]result.Scenario, error) {
	return e.run(ctx, repeat(s, n))
}

// run runs scheds through the scenario pool, each as soon as a slot is
// free (the streams share the slots), and gives the evidence back: only
// conclude keeps a database. The first error stops the rest, as in
// runner.scenarios.
func (e *explorer) run(ctx context.Context, scheds []faults.Schedule) ([]result.Scenario, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	outs := make([]result.Scenario, len(scheds))
	var wg sync.WaitGroup
	for i, s := range scheds {
		if !e.acquire(ctx) {
			break
		}
		wg.Go(func() {
			defer func() { <-e.slots }()
			out, evidence, err := e.r.scenarios(ctx, []faults.Schedule{s}, e.res)
			if err == nil && evidence != nil {
				err = e.r.giveBack(context.WithoutCancel(ctx), evidence.db)
			}
			if err != nil {
				cancel(err)
				return
			}
			outs[i] = out[0]
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return outs, nil
}

// acquire takes a slot of the pool, or reports false when ctx ended
// first.
func (e *explorer) acquire(ctx context.Context) bool {
	select {
	case e.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	if ctx.Err() != nil {
		<-e.slots
		return false
	}
	return true
}

// shiftedRuns is how many clean runs at a later clock r made.
func shiftedRuns(r *runner) int {
	r.shifted.mu.Lock()
	defer r.shifted.mu.Unlock()
	return len(r.shifted.runs)
}

// repeat is n copies of s.
func repeat(s faults.Schedule, n int) []faults.Schedule {
	scheds := make([]faults.Schedule, n)
	for i := range scheds {
		scheds[i] = s
	}
	return scheds
}

// flaky reports whether runs of one schedule disagree on the verdict.
func flaky(runs []result.Scenario) bool {
	for _, r := range runs[1:] {
		if r.Verdict != runs[0].Verdict {
			return true
		}
	}
	return false
}

// message is the finding, as render.ExplorationFinding writes it: the
// schedules become text here, at the edge.
func (x *Exploration) message(replay string) string {
	text := func(s *faults.Schedule) string {
		if s == nil {
			return ""
		}
		return s.String()
	}
	return render.ExplorationFinding(render.Exploration{
		Result: &x.Result.Result, Flaky: x.Flaky, Replay: text(x.Replay), Found: text(x.Found), Minimal: text(x.Minimal),
		FoundAfter: x.FoundAfter, Seed: x.Seed, SavedTo: x.SavedTo,
	}, replay)
}

// rapidTB is the test rapid sees: it notes that rapid failed instead of
// failing the real test with rapid's report; the seed comes from the
// fail file rapid writes (rapidfail.go).
type rapidTB struct {
	name string

	mu     sync.Mutex
	failed bool
}

func (r *rapidTB) Helper()      {}
func (r *rapidTB) Name() string { return r.name }
func (r *rapidTB) Logf(string, ...any) {
}
func (r *rapidTB) Log(...any)           {}
func (r *rapidTB) Skipf(string, ...any) {}
func (r *rapidTB) Skip(...any)          {}
func (r *rapidTB) SkipNow()             {}
func (r *rapidTB) Error(args ...any)    { r.Errorf("%s", fmt.Sprint(args...)) }
func (r *rapidTB) Fatal(args ...any)    { r.Errorf("%s", fmt.Sprint(args...)) }
func (r *rapidTB) Fatalf(f string, a ...any) {
	r.Errorf(f, a...)
}
func (r *rapidTB) FailNow() {}
func (r *rapidTB) Fail()    { r.mu.Lock(); r.failed = true; r.mu.Unlock() }
func (r *rapidTB) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *rapidTB) Errorf(string, ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
}

var seedOnce sync.Once

// applySeed hands -twice.seed to rapid, once per test binary, as its
// -rapid.seed, unless that was given too; shard i of several adds i-1, so
// shards draw different schedules. It sets rapid's flag because rapid
// has no other way in: rapid.Check takes its seed only from -rapid.seed
// or RAPID_SEED, and reads RAPID_SEED once, when the test binary starts.
func applySeed(shard *result.ShardRun) error {
	seed, err := seedSetting()
	if err != nil || seed == 0 {
		return err
	}
	if shard != nil {
		seed += uint64(shard.Index - 1)
	}
	seedOnce.Do(func() {
		if f := flag.Lookup("rapid.seed"); f != nil && f.Value.String() == "0" {
			err = f.Value.Set(strconv.FormatUint(seed, 10))
		}
	})
	if err != nil {
		return fmt.Errorf("handing -twice.seed to rapid: %w", err)
	}
	return nil
}

type savedSchedule struct {
	file  string
	sched faults.Schedule
}

// readSaved reads the *.schedule files of dir in name order. A missing
// dir holds none.
func readSaved(dir string) ([]savedSchedule, error) {
	if dir == "" {
		return nil, nil
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.schedule"))
	if err != nil {
		return nil, fmt.Errorf("listing saved schedules in %s: %w", dir, err)
	}
	sort.Strings(files)
	var out []savedSchedule
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, blame.Userf("reading a saved schedule: %w", err)
		}
		var text string
		for _, line := range strings.Split(string(data), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				text = line
				break
			}
		}
		s, err := faults.Parse(text)
		if err != nil {
			return nil, blame.Userf("saved schedule %s: %w; fix or delete the file", f, err)
		}
		s.Fault = faults.NameExplore
		out = append(out, savedSchedule{file: f, sched: s})
	}
	return out, nil
}

func schedulesOf(saved []savedSchedule) []faults.Schedule {
	out := make([]faults.Schedule, len(saved))
	for i, s := range saved {
		out[i] = s.sched
	}
	return out
}

func containsSchedule(saved []savedSchedule, sched faults.Schedule) bool {
	text := sched.String()
	for _, s := range saved {
		if s.sched.String() == text {
			return true
		}
	}
	return false
}

// save writes sched to dir in a file named by its text's hash, and
// returns the file's name.
func save(dir, job string, s faults.Schedule) (string, error) {
	sched := s.String()
	sum := sha256.Sum256([]byte(sched))
	name := filepath.Join(dir, hex.EncodeToString(sum[:6])+".schedule")
	text := fmt.Sprintf("# twice: job %q is not idempotent under this schedule; Explore replays it before drawing new ones.\n%s\n", job, sched)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", blame.Userf("saving the failing schedule: %w", err)
	}
	if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
		return "", blame.Userf("saving the failing schedule: %w", err)
	}
	return name, nil
}

// exploreShard cuts an exploration down to this machine's shard, nil
// when unsharded: its share of the budget checks and of the saved
// schedules.
func exploreShard(checks int, saved []savedSchedule) (int, []savedSchedule, *result.ShardRun, error) {
	sh, err := shardSetting()
	if err != nil || sh == nil {
		return checks, saved, nil, err
	}
	var mine []savedSchedule
	for i, s := range saved {
		if sh.Has(i) {
			mine = append(mine, s)
		}
	}
	return sh.Share(checks), mine, sh, nil
}

// rapid saves each failure in a fail file, which its next run of the same
// test replays before it draws: testdata/rapid/<test>/<test>-*.fail, whose
// first line that is not a "#" comment is "<version>#<seed>" (rapid's
// persist.go writes it, and reads it back for -rapid.failfile). Explore
// takes the seed from there, and removes the file: it saves the schedule
// instead, which stays valid when the generator changes.

// rapidRoot is where rapid writes fail files, relative to the test's
// package directory.
var rapidRoot = filepath.Join("testdata", "rapid")

// rapidSnapshot is what existed under rapidRoot before a rapid.Check.
type rapidSnapshot struct {
	dirs  map[string]bool // rapidRoot's parents and rapidRoot, and its test directories
	files map[string]bool // fail files
}

// rapidFiles notes the fail files and directories rapid may write under.
func rapidFiles() rapidSnapshot {
	s := rapidSnapshot{dirs: map[string]bool{}, files: map[string]bool{}}
	for _, dir := range []string{"testdata", rapidRoot} {
		if _, err := os.Stat(dir); err == nil {
			s.dirs[dir] = true
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(rapidRoot, "*"))
	for _, d := range dirs {
		s.dirs[d] = true
	}
	files, _ := filepath.Glob(filepath.Join(rapidRoot, "*", "*.fail"))
	for _, f := range files {
		s.files[f] = true
	}
	return s
}

// takeNew reads the seed from the fail file rapid wrote since s was
// taken, and removes that file and the directories rapid made for it
// that are left empty. The seed is 0 when rapid wrote none (nothing
// failed, or it replayed a fail file, or it could not write one).
func (s rapidSnapshot) takeNew() (uint64, error) {
	files, _ := filepath.Glob(filepath.Join(rapidRoot, "*", "*.fail"))
	var seed uint64
	for _, f := range files {
		if s.files[f] {
			continue
		}
		got, err := failFileSeed(f)
		if err != nil {
			return 0, err
		}
		seed = got
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("removing rapid's fail file: %w", err)
		}
		for dir := filepath.Dir(f); dir != "." && !s.dirs[dir]; dir = filepath.Dir(dir) {
			if os.Remove(dir) != nil {
				break // not empty
			}
		}
	}
	return seed, nil
}

// failFileSeed reads the seed from rapid's fail file f.
func failFileSeed(f string) (uint64, error) {
	file, err := os.Open(f)
	if err != nil {
		return 0, fmt.Errorf("reading rapid's fail file: %w", err)
	}
	defer func() { _ = file.Close() }() // read only: nothing to lose
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20) // the comments hold the failing test's output
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		_, seed, ok := strings.Cut(line, "#")
		n, err := strconv.ParseUint(seed, 10, 64)
		if !ok || err != nil {
			return 0, fmt.Errorf("rapid's fail file %s starts with %q, not <version>#<seed>: a rapid this twice does not know", f, line)
		}
		return n, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading rapid's fail file %s: %w", f, err)
	}
	return 0, fmt.Errorf("rapid's fail file %s holds no seed: a rapid this twice does not know", f)
}
