package harness

import (
	"flag"
	"fmt"
	"github.com/runtwice/twice/internal/record"
	"os"
	"strconv"
	"strings"

	"github.com/runtwice/twice/faults"
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
)

func init() {
	flag.String("twice.replay", "", "twice: run exactly this schedule, in its text form, instead of the faults or the exploration (env "+ReplayEnv+")")
	flag.Int("twice.checks", 0, "twice: how many schedules Explore draws; 0 means ExploreOptions.Checks, or 100 (env "+ChecksEnv+")")
	flag.Bool("twice.keep", true, "twice: keep a failed check's databases as evidence; false drops them (env "+KeepEnv+")")
	flag.Uint64("twice.seed", 0, "twice: the seed Explore hands rapid, as -rapid.seed; 0 means a random one (env "+SeedEnv+")")
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
		return faults.Schedule{}, false, fmt.Errorf("%w (from -twice.replay or %s)", err, ReplayEnv)
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
		return 0, fmt.Errorf("[twice] -twice.checks or %s is %q; want a number of schedules, like 500", ChecksEnv, text)
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
		return 0, fmt.Errorf("[twice] -twice.seed or %s is %q; want the number a finding printed, like 1234567", SeedEnv, text)
	}
	return n, nil
}

// withReplay makes cfg run only the -twice.replay schedule when one is
// given.
func withReplay(cfg Config) (Config, error) {
	s, ok, err := replaySchedule()
	if err != nil || !ok {
		return cfg, err
	}
	cfg.Faults = []faults.Fault{faults.Replay(s)}
	return cfg, nil
}

// replayLine is the command that runs sched alone in the named test.
func replayLine(testName string, sched string) string {
	return fmt.Sprintf("%s -twice.replay='%s'", rerunLine(testName), sched)
}
