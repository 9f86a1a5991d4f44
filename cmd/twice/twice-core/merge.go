package main

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/runtwice/twice/cmd/twice/internal/about"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/record"
	"github.com/runtwice/twice/internal/redact"
	"github.com/runtwice/twice/internal/report"
)

// shardOf is the shard twice report runs, from -shard, -twice.shard (in
// env, as TWICE_SHARD=i/n), $TWICE_SHARD or the CI's own shard variables
// (record.CIShard), nil for a whole run; env gains TWICE_SHARD for the
// tests when -shard gave it.
func shardOf(flagText string, env []string) (*report.Shard, []string, error) {
	fromFlags := ""
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, record.ShardEnv+"="); ok {
			fromFlags = v
		}
	}
	text, source := flagText, "-shard"
	switch {
	case flagText != "" && fromFlags != "" && fromFlags != flagText:
		return nil, nil, blame.Userf("-shard %s and -twice.shard=%s disagree; give one", flagText, fromFlags)
	case flagText != "":
		env = append(env, record.ShardEnv+"="+flagText)
	case fromFlags != "":
		text, source = fromFlags, "-twice.shard"
	case os.Getenv(record.ShardEnv) != "":
		text, source = os.Getenv(record.ShardEnv), record.ShardEnv
	default:
		var err error
		text, source, err = record.CIShard(os.Getenv)
		if err != nil {
			return nil, nil, blame.Userf("the CI's shard variables %s: %w; set %s=i/n or -shard to say which shard this is (1/1 runs every schedule)", source, err, record.ShardEnv)
		}
	}
	if strings.TrimSpace(text) == "" {
		return nil, env, nil
	}
	s, err := result.ParseShard(text)
	if err != nil {
		return nil, nil, blame.Userf("%s: %w", source, err)
	}
	return &report.Shard{Index: s.Index, Count: s.Count}, env, nil
}

// mergeCommand joins the shards' reports named by args (report.json
// files, or the directories twice report wrote them into) into one
// report in dir.
func mergeCommand(args []string, dir string, sc *redact.Scrubber, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		say(stderr, "-merge needs the report.json of every shard: twice report -merge -o DIR shard-1/report.json shard-2/report.json ...")
		return report.ExitBroken
	}
	out, err := report.ClaimDir(dir)
	if err != nil {
		sayErr(stderr, err)
		return report.ExitBroken
	}
	defer out.Release()
	var in []report.Input
	for _, a := range args {
		r, err := readReportFile(a, "a shard's report")
		if err != nil {
			sayErr(stderr, err)
			return report.ExitBroken
		}
		in = append(in, report.Input{From: a, Report: r})
	}
	r, err := report.Merge(in)
	if err != nil {
		sayErr(stderr, err)
		return report.ExitBroken
	}
	return writeReport(r, out, sc, stdout, stderr)
}

// readReportFile reads the report.json at path, or in the directory path;
// what names it in errors.
func readReportFile(path, what string) (*report.Report, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, report.FileJSON)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, blame.Userf("cannot read %s: %w", what, err)
	}
	var head struct {
		Schema int `json:"schema"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, blame.Userf("%s is not a twice report.json: %w", path, err)
	}
	if head.Schema != report.SchemaVersion {
		return nil, blame.Userf("%s has report schema %d, this twice reads %d: use the twice that wrote it", path, head.Schema, report.SchemaVersion)
	}
	var r report.Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, blame.Userf("%s is not a twice report.json: %w", path, err)
	}
	return &r, nil
}

// twiceVersion is this binary's twice: its module version, and the
// commit it was built from when the build recorded one ("+dirty" with
// uncommitted changes).
func twiceVersion() string { return about.Version() }

// headCommit is the git commit checked out where twice runs; empty
// outside a git checkout or without git. Uncommitted changes are not
// marked: a go command that tidies go.work.sum on one CI machine would
// keep its shard from merging.
func headCommit() string {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
