package pgserver

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// runPrefixRE is the only prefix DropOnExit takes: one run's databases
// (see internal/freshdb's names), never twice_kept_ or a wider pattern.
var runPrefixRE = regexp.MustCompile(`^twice_[0-9a-f]{8}_$`)

// runDatabaseRE matches every name a run generates for live work. The
// watchdog drops a database only if its name matches this, starts with
// the prefix it was given and carries that run's RunMarker.
var runDatabaseRE = regexp.MustCompile(`^twice_[0-9a-f]{8}_[a-z0-9]{1,40}$`)

// RunMarker is the comment (COMMENT ON DATABASE) internal/freshdb gives
// every database of the run with ID runID (8 lowercase hex digits) as it
// creates it. A name alone proves nothing: someone may have made a
// twice_deadbeef_d1 of their own. Defined here, where the exit watchdog
// checks it, because freshdb imports this package, not the reverse.
func RunMarker(runID string) string { return "twice run " + runID }

// prefixRunID is the run ID in a run prefix (twice_<run ID>_).
func prefixRunID(prefix string) string {
	return strings.TrimSuffix(strings.TrimPrefix(prefix, "twice_"), "_")
}

// dropPatience bounds the watchdog's whole drop of one run's databases: a
// server that stopped answering must not keep the watchdog alive forever.
const dropPatience = 2 * time.Minute

// DropOnExit arranges for the databases of one run, those named
// prefix<suffix> with prefix "twice_<8 lowercase hex digits>_" and a suffix
// of 1 to 40 lowercase letters and digits that carry the run's marker
// (RunMarker of those 8 digits), to be dropped (WITH (FORCE)) on this
// server once this process has exited, however it ends: normal exit,
// panic, SIGKILL. Kept databases (twice_kept_...), a database of such a
// name without the marker or with another run's, and every other name are
// never touched. Any other prefix is refused with an error.
//
// For ModeURL it starts a watchdog process on first use (one per Server)
// and hands it the prefix and the server's connection string through a
// pipe, never argv or the environment. Close does not trigger it: the
// databases may still be in use until the process ends. For ModeLocal and
// ModeDocker it does nothing, since the server and every database in it go
// when the process exits.
//
// Calling it again with the same prefix does nothing.
func (s *Server) DropOnExit(prefix string) error {
	if !runPrefixRE.MatchString(prefix) {
		return fmt.Errorf("DropOnExit(%q): not a run prefix; want twice_ + 8 lowercase hex digits + _, e.g. twice_0a1b2c3d_ (only one run's own databases may be dropped at exit)", prefix)
	}
	if s.mode != ModeURL {
		return nil
	}
	s.dropMu.Lock()
	defer s.dropMu.Unlock()
	if s.dropPrefixes[prefix] {
		return nil
	}
	if s.dropWD == nil {
		wd, err := startWatchdog()
		if err != nil {
			return err
		}
		s.dropWD = wd
		s.dropPrefixes = map[string]bool{}
	}
	if err := s.dropWD.watchDatabases(prefix, s.base); err != nil {
		return err
	}
	s.dropPrefixes[prefix] = true
	return nil
}

// dbsLine is the watchdog line for one run's databases. The connection
// string is Go-quoted: it may hold spaces, quotes or even newlines.
func dbsLine(prefix, connString string) string {
	return "dbs " + prefix + " " + strconv.Quote(connString)
}

type dbsJob struct {
	prefix     string
	connString string
}

func parseDBsLine(rest string) (dbsJob, bool) {
	prefix, quoted, ok := strings.Cut(rest, " ")
	if !ok || !runPrefixRE.MatchString(prefix) {
		return dbsJob{}, false
	}
	cs, err := strconv.Unquote(quoted)
	if err != nil {
		return dbsJob{}, false
	}
	return dbsJob{prefix: prefix, connString: cs}, true
}

// dropRunDatabases drops every database on the server at connString whose
// name starts with prefix and matches runDatabaseRE and whose comment is
// the run's marker, closing sessions still in them. version forces the way
// to do it (0: ask the server); tests use it to run the pre-13 path on a
// newer server.
//
// It lists again until nothing is left and no session still runs a
// statement naming the prefix: a test process killed in the middle of
// CREATE DATABASE leaves a backend that finishes it after the first list.
func dropRunDatabases(ctx context.Context, prefix, connString string, version int) error {
	if !runPrefixRE.MatchString(prefix) {
		return fmt.Errorf("refusing to drop databases with prefix %q: not a run prefix", prefix)
	}
	cfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		return fmt.Errorf("drop databases %s*: connection string: %w", prefix, err)
	}
	if cfg.ConnectTimeout == 0 || cfg.ConnectTimeout > urlTimeout {
		cfg.ConnectTimeout = urlTimeout
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("drop databases %s*: connect to %s: %w", prefix, describeHost(cfg), err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if version == 0 {
		res := conn.ExecParams(ctx, `SELECT current_setting('server_version_num')`, nil, nil, nil, nil).Read()
		if res.Err != nil {
			return fmt.Errorf("drop databases %s*: server version: %w", prefix, res.Err)
		}
		if len(res.Rows) == 1 {
			version, _ = strconv.Atoi(string(res.Rows[0][0]))
		}
	}
	var errs []error
	for {
		// Only the run's own: its marker, not just its name. A database
		// whose creator died between CREATE DATABASE and the COMMENT has no
		// marker either and stays, since nothing tells it from a foreign one.
		res := conn.ExecParams(ctx,
			`SELECT datname FROM pg_database WHERE left(datname, length($1)) = $1
				AND shobj_description(oid, 'pg_database') = $2 ORDER BY datname`,
			[][]byte{[]byte(prefix), []byte(RunMarker(prefixRunID(prefix)))}, nil, nil, nil).Read()
		if res.Err != nil {
			return fmt.Errorf("drop databases %s*: list them: %w", prefix, res.Err)
		}
		errs = errs[:0]
		for _, row := range res.Rows {
			name := string(row[0])
			if !strings.HasPrefix(name, prefix) || !runDatabaseRE.MatchString(name) {
				continue
			}
			if err := dropDatabase(ctx, conn, name, version); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
		res = conn.ExecParams(ctx,
			`SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND state = 'active' AND strpos(query, $1) > 0`,
			[][]byte{[]byte(prefix)}, nil, nil, nil).Read()
		busy := res.Err == nil && len(res.Rows) == 1 && string(res.Rows[0][0]) != "0"
		if !busy && len(errs) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			errs = append(errs, ctx.Err())
			return fmt.Errorf("drop databases %s*: %w", prefix, errors.Join(errs...))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// dropDatabase drops one database, closing its sessions: WITH (FORCE) from
// PostgreSQL 13, before that by terminating them and retrying while a
// terminated session is still on its way out.
func dropDatabase(ctx context.Context, conn *pgconn.PgConn, name string, version int) error {
	stmt := "DROP DATABASE IF EXISTS " + quoteIdent(name)
	if version >= 130000 {
		return conn.Exec(ctx, stmt+" WITH (FORCE)").Close()
	}
	for {
		res := conn.ExecParams(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`,
			[][]byte{[]byte(name)}, nil, nil, nil).Read()
		if res.Err != nil {
			return res.Err
		}
		err := conn.Exec(ctx, stmt).Close()
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" { // object_in_use
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}
