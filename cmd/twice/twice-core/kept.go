package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/evidence"
	"github.com/runtwice/twice/internal/text"
)

// keptCommand lists, and with -drop removes, the evidence failed checks
// kept: databases named twice_kept_<run>_<n> on the server of
// TWICE_DATABASE_URL, and dump files of databases kept on a server that
// died with its test (the local cluster, Docker), one directory per run.
// It acts on one run: the latest, or -run ID; -all acts on every run, and
// names given act on those only. Nothing whose name is not a kept
// database's is ever listed or touched.
func keptCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("twice kept", flag.ContinueOnError)
	fs.SetOutput(stderr)
	drop := fs.Bool("drop", false, "drop the kept databases and remove the dump files of the run (only those named, if any are)")
	runID := fs.String("run", "", "act on the evidence of the run with this `ID` (the 8 hex digits in twice_kept_<ID>_<n>), not the latest run's")
	all := fs.Bool("all", false, "act on the evidence of every run")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	only := fs.Args()
	for _, n := range only {
		if !evidence.IsName(n) {
			say(stderr, "%q is not the name of a kept database (twice_kept_<run ID>_<n>); twice kept touches nothing else", n)
			return 2
		}
	}
	if *all && *runID != "" {
		say(stderr, "kept takes -run ID or -all, not both")
		return 2
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var items []keptItem
	url := os.Getenv("TWICE_DATABASE_URL")
	if url != "" {
		dbs, err := keptDatabases(ctx, url)
		if err != nil {
			sayErr(stderr, err)
			return 2
		}
		items = append(items, dbs...)
	} else {
		say(stderr, "TWICE_DATABASE_URL is unset: listing dump files only")
	}
	files, err := keptDumps()
	if err != nil {
		sayErr(stderr, err)
		return 2
	}
	items = append(items, files...)

	runs := keptRuns(items)
	chosen := *runID
	switch {
	case len(only) > 0 || *all:
		chosen = ""
	case chosen == "" && len(runs) > 0:
		chosen = runs[0]
	}
	if chosen != "" {
		others := len(runs) - 1
		if !slices.Contains(runs, chosen) {
			others = len(runs)
		}
		what := "the latest run"
		if *runID != "" {
			what = "run " + chosen
		}
		note := ""
		if others > 0 {
			note = fmt.Sprintf("; %d other %s kept evidence too: -run ID for one of them (%s), -all for every run", others, text.Plural(others, "run"), strings.Join(slices.DeleteFunc(slices.Clone(runs), func(r string) bool { return r == chosen }), ", "))
		}
		say(stdout, "%s: %s%s", what, chosen, note)
	}
	wanted := func(it keptItem) bool {
		switch {
		case len(only) > 0:
			return slices.Contains(only, it.name)
		case chosen != "":
			return it.run == chosen
		}
		return true
	}

	var errs []error
	found := 0
	for _, it := range items {
		if !wanted(it) {
			continue
		}
		found++
		switch {
		case !*drop && it.file == "":
			_, _ = fmt.Fprintf(stdout, "%s\tdatabase on the server of TWICE_DATABASE_URL\n", it.name)
		case !*drop:
			_, _ = fmt.Fprintf(stdout, "%s\tdump; restore: %s\n", it.file, restoreCommand(it))
		case it.file == "":
			if err := dropKeptDatabase(ctx, url, it.name); err != nil {
				errs = append(errs, err)
				continue
			}
			_, _ = fmt.Fprintf(stdout, "dropped database %s\n", it.name)
		default:
			if err := os.Remove(it.file); err != nil {
				errs = append(errs, blame.Userf("removing the dump %s: %w", it.file, err))
				continue
			}
			// The run's directory goes with its last dump.
			_ = os.Remove(filepath.Dir(it.file))
			_, _ = fmt.Fprintf(stdout, "removed dump %s\n", it.file)
		}
	}
	if found == 0 {
		say(stdout, "nothing kept (dumps would be in %s)", evidence.Dir())
	}
	if len(errs) > 0 {
		_, _ = fmt.Fprintln(stderr, errors.Join(errs...))
		return 1
	}
	return 0
}

// keptItem is one piece of evidence: a database (file empty) or a dump.
type keptItem struct {
	name, run, file string
	// newer orders the items of one kind: a database's OID, a dump's
	// modification time in nanoseconds.
	newer int64
}

// restoreCommand is how to restore a dump, wherever it lies (dumps of
// older twice versions lie in evidence.Dir itself).
func restoreCommand(it keptItem) string {
	cmd := evidence.RestoreCommand(it.name)
	return strings.Replace(cmd, evidence.DumpFile(it.name), it.file, 1)
}

// keptRuns are the run IDs of the items, the latest first: by their
// newest dump, then by their newest database.
func keptRuns(items []keptItem) []string {
	newest := map[string][2]int64{} // run -> {newest dump, newest database}
	for _, it := range items {
		n := newest[it.run]
		k := 1
		if it.file != "" {
			k = 0
		}
		n[k] = max(n[k], it.newer)
		newest[it.run] = n
	}
	runs := make([]string, 0, len(newest))
	for r := range newest {
		runs = append(runs, r)
	}
	slices.SortFunc(runs, func(a, b string) int {
		na, nb := newest[a], newest[b]
		if c := cmp.Compare(nb[0], na[0]); c != 0 {
			return c
		}
		if c := cmp.Compare(nb[1], na[1]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return runs
}

// keptDatabases lists the kept databases on the server of url.
func keptDatabases(ctx context.Context, url string) ([]keptItem, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, blame.Userf("connecting to TWICE_DATABASE_URL: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	rows, err := conn.Query(ctx, `SELECT datname, oid::bigint FROM pg_database WHERE datname LIKE $1 ORDER BY datname`, evidence.LikePattern)
	if err != nil {
		return nil, blame.Userf("listing kept databases: %w", err)
	}
	var out []keptItem
	for rows.Next() {
		var it keptItem
		if err := rows.Scan(&it.name, &it.newer); err != nil {
			return nil, blame.Userf("listing kept databases: %w", err)
		}
		if evidence.IsName(it.name) {
			it.run = evidence.RunOf(it.name)
			out = append(out, it)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, blame.Userf("listing kept databases: %w", err)
	}
	return out, nil
}

// dropKeptDatabase drops one kept database, closing the sessions still in
// it (a psql left open on the evidence would block the drop).
func dropKeptDatabase(ctx context.Context, url, name string) error {
	if !evidence.IsName(name) {
		return blame.Userf("refusing to drop %q: not a kept database", name)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return blame.Userf("connecting to TWICE_DATABASE_URL: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, name); err != nil {
		return blame.Userf("dropping database %s (closing its sessions): %w", name, err)
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
		return blame.Userf("dropping database %s: %w", name, err)
	}
	return nil
}

// keptDumps lists the dump files of kept databases, by run: in their
// run's directory, or (dumps of older twice versions) in evidence.Dir
// itself.
func keptDumps() ([]keptItem, error) {
	var out []keptItem
	add := func(dir string, inRun string) error {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return blame.Userf("listing kept dumps: %w", err)
		}
		for _, e := range entries {
			name, ok := strings.CutSuffix(e.Name(), ".sql")
			if !ok || !e.Type().IsRegular() || !evidence.IsName(name) || (inRun != "" && evidence.RunOf(name) != inRun) {
				continue
			}
			it := keptItem{name: name, run: evidence.RunOf(name), file: filepath.Join(dir, e.Name())}
			if fi, err := e.Info(); err == nil {
				it.newer = fi.ModTime().UnixNano()
			}
			out = append(out, it)
		}
		return nil
	}
	if err := add(evidence.Dir(), ""); err != nil {
		return nil, err
	}
	entries, _ := os.ReadDir(evidence.Dir())
	for _, e := range entries {
		if e.IsDir() && evidence.IsName("twice_kept_"+e.Name()+"_1") {
			if err := add(filepath.Join(evidence.Dir(), e.Name()), e.Name()); err != nil {
				return nil, err
			}
		}
	}
	slices.SortFunc(out, func(a, b keptItem) int { return strings.Compare(a.name, b.name) })
	return out, nil
}
