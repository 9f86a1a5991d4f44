// Package about is what the twice command says of itself without
// building anything: its usage and its version. Both cmd/twice (the
// launcher, which answers twice help and twice version before it builds
// twice-core, so they work outside a module too) and twice-core use it.
package about

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
)

// CommandEnv names the variable through which the launcher tells
// twice-core how the user runs twice, for the commands it prints (twice
// replay lines): "twice", "go run github.com/runtwice/twice/cmd/twice".
const CommandEnv = "TWICE_COMMAND"

// Command is how to run twice in the commands twice-core prints: what
// CommandEnv says, else "twice".
func Command() string {
	if c := strings.TrimSpace(os.Getenv(CommandEnv)); c != "" {
		return c
	}
	return "twice"
}

// Invocation is how the user ran the launcher whose os.Args[0] is arg0
// and whose package is pkg: "go run PKG" for a binary go run built (in a
// go-build directory's exe/), the path as typed for one run by its path,
// else "twice", a command on PATH.
func Invocation(arg0, pkg string) string {
	dir := filepath.Dir(arg0)
	switch {
	case pkg != "" && filepath.Base(dir) == "exe" && strings.Contains(filepath.ToSlash(dir), "/go-build"):
		return "go run " + pkg
	case strings.ContainsRune(arg0, filepath.Separator) || strings.ContainsRune(arg0, '/'):
		return arg0
	}
	return "twice"
}

// Usage is twice's usage text.
const Usage = `usage:
  twice report [-o DIR] [-shard I/N] [-run REGEXP] [-count N] [-tags TAGS] [-timeout D] [-race] [-p N] [-twice.NAME=VALUE] [packages]
  twice report -shard I/N -timings report.json [-o DIR] [packages]
  twice report -rerun-failed report.json [-o DIR]
  twice report -merge [-o DIR] shard-1/report.json shard-2/report.json ...
  twice plan -shards N [-timings report.json]
  twice replay '<schedule>' [package] -run TestX [-tags TAGS] [-timeout D] [-race]
  twice kept [-drop] [-run ID | -all] [twice_kept_NAME...]
  twice version

report runs the packages' harness checks (default ./...) and writes
twice-report/{index.html,summary.md,junit.xml,report.json}.
-shard I/N runs shard I of N of every check's schedules, dealt in turn,
or by what they cost in a previous report with -timings; -merge joins the
shards' reports into one; -rerun-failed runs only the schedules that
failed in a previous report.
plan prints the CI matrix (JSON) of a run split into N shards.
Exit codes: 0 idempotent or expected findings, 1 unexpected findings or
failing tests, 2 the tool could not check (usage, no such package, build
failure, a check that could not run, interrupted).
replay reruns one schedule and prints its diff.
kept lists the databases failed checks kept as evidence (on the server of
TWICE_DATABASE_URL) and their dump files (local cluster), of the latest
run (-run ID: another run's; -all: every run's); -drop removes them.
version says which twice this is.
`

// Version is the twice version of the running binary: its module version
// and, when the binary records one, the commit it was built from ("+dirty"
// when the checkout had changes); "" when it records neither.
func Version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	v := info.Main.Version
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" && !strings.Contains(v, rev[:min(12, len(rev))]) {
		v = strings.TrimSpace(v + " " + rev + dirty)
	}
	return v
}

// VersionLine is what twice version prints.
func VersionLine() string {
	v := Version()
	if v == "" || v == "(devel)" {
		v = "(devel: built from a checkout without version control information)"
	}
	return "twice " + v + "\n"
}
