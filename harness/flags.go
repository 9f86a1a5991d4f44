package harness

import (
	"cmp"
	"flag"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/longtest"
	"github.com/runtwice/twice/internal/record"
)

// The -twice.* flags of a test binary, each mirrored by a TWICE_*
// environment variable; a flag given on the command line wins. They are
// read when a check starts, so programs that never parse flags get the
// environment's values.
const (
	// ReplayEnv holds a schedule in its text form: Check and Explore run
	// exactly that schedule instead of their faults. Flag -twice.replay.
	ReplayEnv = record.ReplayEnv
	// ChecksEnv is how many schedules Explore draws. Flag -twice.checks.
	ChecksEnv = "TWICE_CHECKS"
	// SeedEnv is the seed Explore hands rapid, as -rapid.seed would.
	// Flag -twice.seed.
	SeedEnv = "TWICE_SEED"
	// KeepEnv set to false drops a failed check's databases instead of
	// keeping them as evidence (CI runs nobody will inspect). Flag
	// -twice.keep.
	KeepEnv = "TWICE_KEEP"
	// ParallelEnv is how many scenarios a check runs at once, each on a
	// database of its own; unset or 0 means GOMAXPROCS. It is the
	// machine's setting, not the job's: a laptop and a CI runner differ.
	// Flag -twice.parallel.
	ParallelEnv = "TWICE_PARALLEL"
)

// ShardEnv splits every check of a test binary across machines: set to
// "i/n" (flag -twice.shard=i/n), Check and Run execute only shard i of n
// of each check's schedules, counted from 1 as CI matrices number their
// jobs: 1/3, 2/3 and 3/3 together run every schedule exactly once.
//
// Schedules are dealt out in turn by their place in the check's list (the
// faults' schedules, in the order of Config.Faults): schedule k goes to
// shard k mod n + 1. Every shard expands the same list from its own clean
// runs, so the split needs no coordination, and each shard gets the same
// number of schedules, give or take one, with a mix of every fault. Every
// shard still runs the two clean reference runs; a shard dealt none of a
// check's schedules passes it with 0 scenarios, and Result.Shard says so.
// Under twice report -timings the runner gives each check what its
// faults' schedules cost in an earlier run, and the check deals them by
// cost instead, costliest first, each to the least loaded shard
// (Result.Shard.Dealt lists the places it took). Scenario.Index keeps
// each scenario's place in the whole list. A -twice.replay schedule is a
// list of one: shard 1 runs it. The orders
// the reduction of the concurrent faults left out (Result.Reductions)
// have places after the list; when a shard's deliveries diverge from what
// the reduction assumed, it runs the ones dealt to it. A shard that saw no
// divergence runs none, so if only some shards' scenarios diverge, the
// joined report lacks the other shards' share of those orders. For a
// queue that hands a job to one delivery at a time
// (queue.Rules.OneDeliveryAtATime), a shard not dealt concurrent-delivery's
// one order runs it too, unreported, to learn whether the queue handed
// out the second delivery, so every shard runs its share of the orders
// left out when it did.
//
// Explore runs its share of the budget (ExploreOptions.Checks or
// -twice.checks): n/Count, one more on the first shards, so the shares add
// up to it; saved schedules are dealt out like a check's. With -twice.seed
// shard i hands rapid the seed plus i-1, so shards draw different
// schedules; a finding prints the seed rapid used, which replays without
// -twice.shard. twice report -shard i/n passes it to the tests, and twice
// report --merge joins the shards' reports into one.
//
// With neither set, the shard is the one the CI system's own variables
// give, if any (Bazel's TEST_SHARD_INDEX and TEST_TOTAL_SHARDS, whose
// status file is touched; CircleCI's, Buildkite's and GitLab's parallel
// job index and count), and Result.Shard.From names them. Where those
// already split the packages across machines, set TWICE_SHARD=1/1, or
// each check runs only its machine's share of its schedules.
const ShardEnv = record.ShardEnv

// LongEnv set to 1 turns on long tests: a check repeated many times to
// show its verdict does not vary, a report over every package. Plain go
// test leaves them out so a test run stays short, and -short leaves them
// out even when it is set; CI sets it once. SkipUnlessLong is the gate a
// long test starts with.
const LongEnv = longtest.Env

// Long reports whether long tests run: LongEnv is 1 and -short is not
// set. It must be called from a test, after testing has parsed its flags.
func Long() bool { return longtest.Enabled() }

// SkipUnlessLong skips t unless long tests run (Long); why says what
// makes the test long, and the skip message names LongEnv.
func SkipUnlessLong(t testing.TB, why string) {
	t.Helper()
	longtest.Skip(t, why)
}

func init() {
	flag.String("twice.replay", "", "twice: run exactly this schedule, in its text form, instead of the faults or the exploration (env "+ReplayEnv+")")
	flag.Int("twice.checks", 0, "twice: how many schedules Explore draws; 0 means ExploreOptions.Checks, or 100 (env "+ChecksEnv+")")
	flag.Bool("twice.keep", true, "twice: keep a failed check's databases as evidence; false drops them (env "+KeepEnv+")")
	flag.Uint64("twice.seed", 0, "twice: the seed Explore hands rapid, as -rapid.seed; 0 means a random one (env "+SeedEnv+")")
	flag.String("twice.shard", "", "twice: run only shard `i/n` of every check's schedules (1/3, 2/3, 3/3); empty runs all (env "+ShardEnv+")")
	flag.Int("twice.parallel", 0, "twice: how many scenarios a check runs at once; 0 means GOMAXPROCS (env "+ParallelEnv+")")
}

// setting returns the value of flag name when it was given on the command
// line, else the environment variable's, else "".
func setting(name, env string) string {
	given := false
	if flag.Parsed() {
		flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	}
	if given {
		if f := flag.Lookup(name); f != nil {
			return f.Value.String()
		}
	}
	return strings.TrimSpace(os.Getenv(env))
}

// keepEvidence reports whether a failed check keeps its databases:
// unless -twice.keep=false or TWICE_KEEP=false.
// A value that is no boolean was refused when the check began (see
// checkInputs), so it keeps.
func keepEvidence() bool {
	v, _ := keepSetting()
	return v
}

// replaySchedule is the schedule -twice.replay or TWICE_REPLAY names, if
// any.
func replaySchedule() (faults.Schedule, bool, error) {
	text := setting("twice.replay", ReplayEnv)
	if text == "" {
		return faults.Schedule{}, false, nil
	}
	s, err := faults.Parse(text)
	if err != nil {
		return faults.Schedule{}, false, blame.Userf("%w (from -twice.replay or %s)", err, ReplayEnv)
	}
	s.Fault = faults.NameReplay
	return s, true, nil
}

// checksSetting is -twice.checks or TWICE_CHECKS, zero when unset.
func checksSetting() (int, error) {
	text := setting("twice.checks", ChecksEnv)
	if text == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(text)
	if err != nil || n < 0 {
		return 0, blame.Userf("-twice.checks or %s is %q; want a number of schedules, like 500", ChecksEnv, text)
	}
	return n, nil
}

// parallelSetting is -twice.parallel or TWICE_PARALLEL: how many
// scenarios run at once, GOMAXPROCS when unset or 0.
func parallelSetting() (int, error) {
	text := setting("twice.parallel", ParallelEnv)
	if text == "" {
		return runtime.GOMAXPROCS(0), nil
	}
	n, err := strconv.Atoi(text)
	if err != nil || n < 0 {
		return 0, blame.Userf("-twice.parallel or %s is %q; want how many scenarios run at once, like 4, or 0 for GOMAXPROCS", ParallelEnv, text)
	}
	if n == 0 {
		return runtime.GOMAXPROCS(0), nil
	}
	return n, nil
}

// seedSetting is -twice.seed or TWICE_SEED, zero when unset.
func seedSetting() (uint64, error) {
	text := setting("twice.seed", SeedEnv)
	if text == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(text, 10, 64)
	if err != nil {
		return 0, blame.Userf("-twice.seed or %s is %q; want the number a finding printed, like 1234567", SeedEnv, text)
	}
	return n, nil
}

// withReplay makes cfg run only the -twice.replay schedule when one is
// given, or else only the schedules the runner's plan reruns for the
// check of job in test (twice report -rerun-failed).
func withReplay(cfg Config, test, job string) (Config, error) {
	s, ok, err := replaySchedule()
	if err != nil {
		return cfg, err
	}
	if ok {
		cfg.Faults = []faults.Fault{faults.Replay(s)}
		return cfg, nil
	}
	list, from, err := rerunSchedules(test, job)
	if err != nil || from == "" {
		return cfg, err
	}
	cfg.Faults = nil
	if len(list) == 0 {
		cfg.rerunNone = from
	}
	for _, s := range list {
		cfg.Faults = append(cfg.Faults, faults.Replay(s))
	}
	return cfg, nil
}

// rerunSchedules are the schedules the runner's plan reruns for the check
// of job in test (twice report -rerun-failed), each under its fault's
// name, and the report they failed in; from is empty when the plan
// reruns nothing, and list is empty when it reruns other checks only.
func rerunSchedules(test, job string) (list []faults.Schedule, from string, err error) {
	p, err := record.ReadPlan()
	if err != nil || p == nil || !p.Rerun {
		return nil, "", err
	}
	from = cmp.Or(p.From, os.Getenv(record.PlanEnv))
	c := p.Check(test, job)
	if c == nil {
		return nil, from, nil
	}
	for _, r := range c.Rerun {
		s, err := faults.Parse(r.Schedule)
		if err != nil {
			return nil, "", blame.Userf("the schedule %q of job %q that %s says failed: %w", r.Schedule, job, from, err)
		}
		s.Fault = cmp.Or(r.Fault, faults.NameReplay)
		list = append(list, s)
	}
	return list, from, nil
}

// shardSetting is -twice.shard or TWICE_SHARD, or else the shard the CI
// system's own variables give (record.CIShard); nil when none is set.
func shardSetting() (*result.ShardRun, error) {
	text, source := setting("twice.shard", ShardEnv), "-twice.shard or "+ShardEnv
	ci := ""
	if text == "" {
		var err error
		text, ci, err = record.CIShard(os.Getenv)
		if err != nil {
			return nil, blame.Userf("the CI's shard variables %s: %w; set %s=i/n to say which shard this is (1/1 runs every schedule)", ci, err, ShardEnv)
		}
		source = ci
	}
	if text == "" {
		return nil, nil
	}
	s, err := result.ParseShard(text)
	if err != nil {
		return nil, blame.Userf("%s: %w", source, err)
	}
	return &result.ShardRun{Shard: s, From: ci}, nil
}

// keepSetting is -twice.keep or TWICE_KEEP: whether a failed check keeps
// its databases, true unless set to false.
func keepSetting() (bool, error) {
	text := setting("twice.keep", KeepEnv)
	if text == "" {
		return true, nil
	}
	v, err := strconv.ParseBool(text)
	if err != nil {
		return true, blame.Userf("-twice.keep or %s is %q; want true (keep a failed check's databases, the default) or false (drop them)", KeepEnv, text)
	}
	return v, nil
}
