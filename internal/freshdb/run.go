package freshdb

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runtwice/twice/internal/blame"
)

// Server is a PostgreSQL server on which this package may create databases.
// ConnString must return a connection string for the given database with
// credentials allowed to CREATE DATABASE. *pgserver.Server satisfies it.
//
// Administrative statements (CREATE/DROP DATABASE, the run's liveness lock)
// run on a maintenance database: "postgres", unless the Server also has a
// method MaintenanceDatabase() string naming another one.
//
// If the Server also has a method DropOnExit(prefix string) error, it is
// called with RunPrefix before this run creates its first database there:
// the Server promises to drop the run's databases once the process has
// exited, so nothing outlives a test binary that has no TestMain calling
// DropAll, or that is killed.
type Server interface {
	ConnString(database string) string
}

// dropOnExiter is the optional part of a Server that drops a run's databases
// once the process has exited, however it ends (*pgserver.Server has it).
type dropOnExiter interface {
	DropOnExit(prefix string) error
}

// maintenanceDB names the database administrative sessions connect to.
func maintenanceDB(srv Server) string {
	if m, ok := srv.(interface{ MaintenanceDatabase() string }); ok {
		if name := m.MaintenanceDatabase(); name != "" {
			return name
		}
	}
	return "postgres"
}

// run is this process's presence on one server: a session holding the run's
// advisory lock for the process lifetime (its liveness signal to other runs)
// and a few maintenance connections for CREATE/DROP DATABASE.
type run struct {
	srv       Server
	lock      *pgconn.PgConn
	admin     *pgxpool.Pool
	version   int  // server_version_num
	superuser bool // needed to reset a database in place

	mu        sync.Mutex
	owned     map[string]bool // databases this run created that still exist
	templates map[string]*start[*Template]

	seq atomic.Uint64 // name suffixes

	exitMu    sync.Mutex
	exitArmed atomic.Bool // the Server will drop this run's databases at exit
}

var runs = struct {
	sync.Mutex
	m map[string]*start[*run]
}{m: map[string]*start[*run]{}}

// runFor returns this process's run on srv, starting it (lock, stale
// cleanup) on first use. Concurrent callers share one start.
func runFor(ctx context.Context, srv Server) (*run, error) {
	key := srv.ConnString(maintenanceDB(srv))
	return startShared(ctx, &runs.Mutex, runs.m, key, "the database run to start", func() (*run, error) { return startRun(ctx, srv) })
}

// start is one piece of work that callers share: the first does it, the
// others wait until done is closed.
type start[T any] struct {
	done chan struct{}
	v    T
	err  error
}

// startShared returns what started[key] gives, doing it with do when no
// caller has, with mu guarding started: concurrent callers share one
// start. A failed start is forgotten, so the next call starts again, and
// a caller that waited on a start which gave up on its own context tries
// with its ctx. waiting says what a caller whose ctx ends waits for.
func startShared[T any](ctx context.Context, mu *sync.Mutex, started map[string]*start[T], key, waiting string, do func() (T, error)) (T, error) {
	for {
		mu.Lock()
		s, ok := started[key]
		if !ok {
			s = &start[T]{done: make(chan struct{})}
			started[key] = s
			mu.Unlock()
			s.v, s.err = do()
			if s.err != nil {
				mu.Lock()
				delete(started, key)
				mu.Unlock()
			}
			close(s.done)
			return s.v, s.err
		}
		mu.Unlock()
		select {
		case <-s.done:
		case <-ctx.Done():
			var zero T
			return zero, blame.Userf("waiting for %s: %w", waiting, ctx.Err())
		}
		if s.err == nil {
			return s.v, nil
		}
		if !isContextErr(s.err) || ctx.Err() != nil {
			var zero T
			return zero, s.err
		}
		// the starter gave up on its own context; start with ours
	}
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// runLockWait is how long a starting run waits for its lock.
const runLockWait = 2 * time.Second

func startRun(ctx context.Context, srv Server) (*run, error) {
	maint := maintenanceDB(srv)
	cs := srv.ConnString(maint)
	lock, err := pgconn.Connect(ctx, cs)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to maintenance database %q: %w (a Server may name another one with MaintenanceDatabase)", maint, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = lock.Close(context.WithoutCancel(ctx))
		}
	}()
	key, _ := runKey(runID)
	// The lock is waited for, a little: this process's own earlier run
	// (closed, its session ending) may still hold it for a moment, as the
	// server ends a closed session's backend after the client has gone.
	rows, err := lock.Exec(ctx, fmt.Sprintf(
		"SET lock_timeout = '%dms'; SELECT pg_advisory_lock(%d, %d), current_setting('server_version_num')::int, "+
			"(SELECT rolsuper FROM pg_roles WHERE rolname = current_user); RESET lock_timeout",
		runLockWait.Milliseconds(), int32(lockClass), int32(key))).ReadAll()
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "55P03" {
		return nil, fmt.Errorf("another live run on this server has run ID %s; run again (IDs are random)", runID)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot take the run lock: %w", err)
	}
	row := rows[1].Rows[0]
	r := &run{
		srv:       srv,
		lock:      lock,
		superuser: string(row[2]) == "t",
		owned:     map[string]bool{},
		templates: map[string]*start[*Template]{},
	}
	if _, err := fmt.Sscan(string(row[1]), &r.version); err != nil {
		return nil, fmt.Errorf("server_version_num %q: %w", row[1], err)
	}
	pcfg, err := pgxpool.ParseConfig(cs)
	if err != nil {
		return nil, fmt.Errorf("maintenance connection string: %w", err)
	}
	pcfg.MaxConns = 4
	pcfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	r.admin, err = pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("maintenance pool: %w", err)
	}
	if _, err := r.cleanStale(ctx); err != nil {
		r.admin.Close()
		return nil, err
	}
	ok = true
	return r, nil
}

// CleanStale drops the databases left on srv by runs that are gone: every
// database named twice_<run ID>_<suffix>, marked at creation with the
// comment "twice run <run ID>", whose run no longer holds its advisory
// lock (a run holds it on one session for its whole life, so this works
// across machines sharing the server, without PIDs), and which the
// connecting role may drop. Databases of live runs, of runs under another
// role, kept databases (twice_kept_...) and every other name are never
// touched; a stale database that still has sessions is skipped and left for
// a later run. It returns the names it dropped.
//
// Every process runs it once per server on first use; call it to clean up
// explicitly, e.g. from a watchdog after the test process died.
func CleanStale(ctx context.Context, srv Server) ([]string, error) {
	r, err := runFor(ctx, srv)
	if err != nil {
		return nil, err
	}
	return r.cleanStale(ctx)
}

func (r *run) cleanStale(ctx context.Context) ([]string, error) {
	// Databases first, locks second: a run takes its lock before it
	// creates any database, so every database listed here whose run is alive
	// has its lock in the list read after.
	var names []string
	// Only databases whose run marker names the run in their name: a
	// foreign database that looks like ours has none. And only those this
	// role may drop (it owns them, or is a superuser): a dead run of
	// another role on a shared server is that role's to clean up, and
	// failing on it would fail this run's checks for someone else's debris.
	rows, err := r.admin.Query(ctx, `SELECT datname FROM pg_database
		WHERE datname ~ '^twice_[0-9a-f]{8}_[a-z0-9]{1,40}$'
		AND shobj_description(oid, 'pg_database') = 'twice run ' || substr(datname, 7, 8)
		AND pg_has_role(datdba, 'USAGE')`)
	if err == nil {
		names, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return nil, fmt.Errorf("listing databases of dead runs: %w", err)
	}
	rows, err = r.admin.Query(ctx, `SELECT objid::bigint FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid = $1::bigint::oid`, int64(lockClass))
	var keys []int64
	if err == nil {
		keys, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	if err != nil {
		return nil, fmt.Errorf("listing live runs: %w", err)
	}
	live := map[uint32]bool{}
	for _, k := range keys {
		live[uint32(k)] = true
	}
	var stale []string
	for _, name := range names {
		m := ownName.FindStringSubmatch(name)
		if m == nil || m[1] == runID {
			continue
		}
		if key, ok := runKey(m[1]); !ok || live[key] {
			continue
		}
		stale = append(stale, name)
	}
	sort.Strings(stale)
	var dropped []string
	var errs []error
	for _, name := range stale {
		// No FORCE: sessions in a database whose run looks dead mean the run
		// may only have lost its lock session; leave it for a later run.
		err := r.adminExec(ctx, "DROP DATABASE IF EXISTS "+quote(name))
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			dropped = append(dropped, name)
		case errors.As(err, &pgErr) && pgErr.Code == "55006": // object_in_use
		default:
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	if len(errs) > 0 {
		return dropped, fmt.Errorf("dropping databases of dead runs: %w", errors.Join(errs...))
	}
	return dropped, nil
}

// create makes a database under a name this run generated and records it.
func (r *run) create(ctx context.Context, name, sql string) error {
	if !ownName.MatchString(name) {
		return fmt.Errorf("refusing to create %q: not a name this run generates", name)
	}
	if err := r.armDropOnExit(); err != nil {
		return err
	}
	r.mu.Lock()
	r.owned[name] = true
	r.mu.Unlock()
	if err := r.adminExec(ctx, sql); err != nil {
		r.mu.Lock()
		delete(r.owned, name)
		r.mu.Unlock()
		return err
	}
	// The marker the stale sweep and the exit watchdog ask for. A process
	// killed before it is written (while CREATE DATABASE runs, or just
	// after) leaves a database neither takes, as neither can tell it from
	// someone else's that looks like ours; drop such a one by hand.
	if err := r.adminExec(ctx, "COMMENT ON DATABASE "+quote(name)+" IS '"+runMarker(runID)+"'"); err != nil {
		return fmt.Errorf("marking database %s as this run's: %w", name, err)
	}
	return nil
}

// armDropOnExit asks the Server, if it can, to drop this run's databases
// once the process has exited; only after it agreed is anything created.
func (r *run) armDropOnExit() error {
	if r.exitArmed.Load() {
		return nil
	}
	d, ok := r.srv.(dropOnExiter)
	if !ok {
		return nil
	}
	r.exitMu.Lock()
	defer r.exitMu.Unlock()
	if r.exitArmed.Load() {
		return nil
	}
	if err := d.DropOnExit(RunPrefix()); err != nil {
		return fmt.Errorf("%w (creating no database this run could leave behind)", err)
	}
	r.exitArmed.Store(true)
	return nil
}

// owns reports whether name is a database this run created and still holds.
func (r *run) owns(name string) bool {
	m := ownName.FindStringSubmatch(name)
	if m == nil || m[1] != runID {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.owned[name]
}

// drop drops a database this run created, closing any sessions left in it.
func (r *run) drop(ctx context.Context, name string) error {
	if !r.owns(name) {
		return fmt.Errorf("refusing to drop database %q: this run (%s*) did not create it", name, RunPrefix())
	}
	stmt := "DROP DATABASE IF EXISTS " + quote(name)
	if r.version >= 130000 {
		stmt += " WITH (FORCE)"
	}
	if err := r.adminExec(ctx, stmt); err != nil {
		return fmt.Errorf("dropping database %s: %w", name, err)
	}
	r.mu.Lock()
	delete(r.owned, name)
	r.mu.Unlock()
	return nil
}

// DropAll drops every database this process created on any server and still
// holds (templates, idle and handed-out databases; not kept ones), then ends
// the runs: their locks are released. Call it when the process is done, e.g.
// at the end of TestMain; on a Server with DropOnExit (*pgserver.Server)
// that is optional, as the Server drops them once the process has exited. A
// later Prepare starts a new run (same run ID).
func DropAll(ctx context.Context) error {
	runs.Lock()
	var all []*run
	for key, ri := range runs.m {
		select {
		case <-ri.done:
		default:
			continue // still starting; nothing of it to drop yet
		}
		if ri.v != nil {
			all = append(all, ri.v)
		}
		delete(runs.m, key)
	}
	runs.Unlock()
	var errs []error
	for _, r := range all {
		r.mu.Lock()
		var tpls []*Template
		for _, b := range r.templates {
			select {
			case <-b.done: // its builder wrote v before closing done
				if b.v != nil {
					tpls = append(tpls, b.v)
				}
			default: // still building: its database is owned, dropped below
			}
		}
		r.mu.Unlock()
		for _, t := range tpls {
			t.closeIdle(ctx)
		}
		r.mu.Lock()
		var names []string
		for name := range r.owned {
			names = append(names, name)
		}
		r.mu.Unlock()
		sort.Strings(names)
		for _, name := range names {
			if err := r.drop(ctx, name); err != nil {
				errs = append(errs, err)
			}
		}
		r.admin.Close()
		_ = r.lock.Close(ctx) // the server releases the run lock with the session
	}
	return errors.Join(errs...)
}

// adminExec runs one administrative statement on the maintenance database.
func (r *run) adminExec(ctx context.Context, sql string) error {
	_, err := r.admin.Exec(ctx, sql)
	return err
}

func quote(name string) string { return pgx.Identifier{name}.Sanitize() }
