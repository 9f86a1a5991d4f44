package main

import (
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

	"github.com/runtwice/twice/internal/evidence"
)

// keptCommand lists, and with -drop removes, the evidence failed checks
// kept: databases named twice_kept_<run>_<n> on the server of
// TWICE_DATABASE_URL, and dump files of databases kept on a server that
// died with its test (the local cluster, Docker). Nothing whose name is
// not a kept database's is ever listed or touched.
func keptCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("twice kept", flag.ContinueOnError)
	fs.SetOutput(stderr)
	drop := fs.Bool("drop", false, "drop the kept databases and remove the dump files (only those named, if any are)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	only := fs.Args()
	for _, n := range only {
		if !evidence.IsName(n) {
			_, _ = fmt.Fprintf(stderr, "[twice] %q is not the name of a kept database (twice_kept_<run ID>_<n>); twice kept touches nothing else\n", n)
			return 2
		}
	}
	wanted := func(name string) bool { return len(only) == 0 || slices.Contains(only, name) }

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	found := 0
	if url := os.Getenv("TWICE_DATABASE_URL"); url != "" {
		names, err := keptDatabases(ctx, url)
		if err != nil {
			_, _ = fmt.Fprintln(stderr, err)
			return 2
		}
		for _, name := range names {
			if !wanted(name) {
				continue
			}
			found++
			if !*drop {
				_, _ = fmt.Fprintf(stdout, "%s\tdatabase on the server of TWICE_DATABASE_URL\n", name)
				continue
			}
			if err := dropKeptDatabase(ctx, url, name); err != nil {
				errs = append(errs, err)
				continue
			}
			_, _ = fmt.Fprintf(stdout, "dropped database %s\n", name)
		}
	} else {
		_, _ = fmt.Fprintln(stderr, "[twice] TWICE_DATABASE_URL is unset: listing dump files only")
	}

	files, err := keptDumps()
	if err != nil {
		_, _ = fmt.Fprintln(stderr, err)
		return 2
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".sql")
		if !wanted(name) {
			continue
		}
		found++
		if !*drop {
			_, _ = fmt.Fprintf(stdout, "%s\tdump; restore: %s\n", f, evidence.RestoreCommand(name))
			continue
		}
		if err := os.Remove(f); err != nil {
			errs = append(errs, fmt.Errorf("[twice] removing the dump %s: %w", f, err))
			continue
		}
		_, _ = fmt.Fprintf(stdout, "removed dump %s\n", f)
	}
	if found == 0 {
		_, _ = fmt.Fprintf(stdout, "[twice] nothing kept (dumps would be in %s)\n", evidence.Dir())
	}
	if len(errs) > 0 {
		_, _ = fmt.Fprintln(stderr, errors.Join(errs...))
		return 1
	}
	return 0
}

// keptDatabases lists the kept databases on the server of url.
func keptDatabases(ctx context.Context, url string) ([]string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("[twice] connecting to TWICE_DATABASE_URL: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE $1 ORDER BY datname`, evidence.LikePattern)
	if err != nil {
		return nil, fmt.Errorf("[twice] listing kept databases: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("[twice] listing kept databases: %w", err)
	}
	return slices.DeleteFunc(names, func(n string) bool { return !evidence.IsName(n) }), nil
}

// dropKeptDatabase drops one kept database, closing the sessions still in
// it (a psql left open on the evidence would block the drop).
func dropKeptDatabase(ctx context.Context, url, name string) error {
	if !evidence.IsName(name) {
		return fmt.Errorf("[twice] refusing to drop %q: not a kept database", name)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("[twice] connecting to TWICE_DATABASE_URL: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, name); err != nil {
		return fmt.Errorf("[twice] dropping database %s (closing its sessions): %w", name, err)
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("[twice] dropping database %s: %w", name, err)
	}
	return nil
}

// keptDumps lists the dump files of kept databases, sorted.
func keptDumps() ([]string, error) {
	entries, err := os.ReadDir(evidence.Dir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("[twice] listing kept dumps: %w", err)
	}
	var files []string
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".sql")
		if ok && e.Type().IsRegular() && evidence.IsName(name) {
			files = append(files, filepath.Join(evidence.Dir(), e.Name()))
		}
	}
	return files, nil
}
