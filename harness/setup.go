package harness

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"reflect"
	"runtime"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/freshdb"
)

// Setup is part of the schema and fixtures every scenario's database starts
// from. The harness applies a job's setups in order once, into a template
// database, and clones it for every scenario. Each step (an SQL text, a
// migration file, a func) must finish within Config.SetupTimeout.
type Setup struct {
	steps []freshdb.Step
	err   error
}

// SQL is schema or fixture SQL, applied as given (it may hold many
// statements).
func SQL(sql string) Setup {
	return Setup{steps: []freshdb.Step{{Name: "SQL", SQL: sql}}}
}

// SQLFiles applies SQL files in the order given.
func SQLFiles(paths ...string) Setup {
	steps, err := freshdb.FromFiles(paths...)
	return Setup{steps: steps, err: err}
}

// Migrations applies the *.sql files directly in dir of fsys "up", as the
// migration tool whose layout the directory uses would:
//
//   - golang-migrate ({version}_{title}.up.sql / .down.sql): the .up.sql
//     files in numeric version order; .down.sql files never;
//   - goose ("-- +goose Up" / "-- +goose Down" in one file): the Up
//     section, in numeric version order ("-- +goose NO TRANSACTION": one
//     statement at a time);
//   - tern ("---- create above / drop below ----"): what is above the
//     line, in numeric order;
//   - dbmate ("-- migrate:up" / "-- migrate:down"): the up block, in name
//     order;
//   - sql-migrate ("-- +migrate Up" / "-- +migrate Down"): the Up
//     sections, numbered names by number first ("-- +migrate Up
//     notransaction": one statement at a time);
//   - otherwise every file whole, in name order.
//
// The layout is detected per directory; a directory mixing them is an
// error. A failing migration is named with its file, layout and line (the
// server's position, or the failing statement's lines when the server
// gives none). What only the tool itself can apply is an error that says
// how to run it through FuncDB with the tool's own migrator: goose's Go
// migrations ({version}_{name}.go) and tern's template actions
// ({{ template "shared/x.sql" }}).
func Migrations(fsys fs.FS, dir string) Setup {
	steps, err := freshdb.FromFS(fsys, dir)
	return Setup{steps: steps, err: err}
}

// Func runs Go code against the template database on one connection.
// Use FuncDB for a pool, a *sql.DB or the connection string.
//
// A func's code cannot be hashed, so a Func template is keyed by the func
// value itself: checks share a template only when they are given the same
// func value (a top-level func, a func literal that captures nothing, or
// one Setup kept in a variable and reused). Every evaluation of a literal
// that captures variables (a table case's seed value) is a func of its
// own and builds its own template, so a table test or -count=N always gets
// the database its func makes. To share one template across checks, build
// the Setup once, for example in a package-level var. The key is the
// value's identity, not what its captured variables hold at the time: a
// func that reads state changed between checks must be a new func value.
func Func(fn func(ctx context.Context, conn *pgx.Conn) error) Setup {
	if fn == nil {
		return Setup{err: blame.Userf("harness.Func: the setup func is nil")}
	}
	return Setup{steps: []freshdb.Step{{Name: funcName(fn), Key: funcKey(fn), Func: fn}}}
}

// FuncDB runs Go code against the template database with whatever it needs
// to reach it: the connection string, a pgx pool, a *sql.DB (see SetupDB).
// It is keyed by the func value like Func. Its ctx is cancelled at the
// setup deadline (Config.SetupTimeout).
func FuncDB(fn func(ctx context.Context, db *SetupDB) error) Setup {
	if fn == nil {
		return Setup{err: blame.Userf("harness.FuncDB: the setup func is nil")}
	}
	return Setup{steps: []freshdb.Step{{Name: funcName(fn), Key: funcKey(fn), Func: func(ctx context.Context, conn *pgx.Conn) error {
		db := &SetupDB{conn: conn, connString: conn.Config().ConnString()}
		defer db.close()
		return fn(ctx, db)
	}}}}
}

func funcName(fn any) string {
	return runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name()
}

// SetupDB is the template database under construction, as a FuncDB setup
// sees it. The harness owns what it hands out: the pool and the *sql.DB are
// closed when the setup func returns, so do not keep them. Connections the
// func opens itself from ConnString should be closed by it; any session
// still open in the template after the setup steps is terminated.
type SetupDB struct {
	conn       *pgx.Conn
	connString string

	mu     sync.Mutex
	pool   *pgxpool.Pool
	sqlDB  *sql.DB
	closed bool
}

// errSetupDBClosed is what a SetupDB used after its func returned says.
var errSetupDBClosed = blame.Userf("harness.SetupDB used after its setup func returned: the harness closed it")

// ConnString is the template database's connection string, as the server
// gives it (a URL or a key=value DSN), for code that connects by itself:
// a migration CLI, pop, an ORM.
func (db *SetupDB) ConnString() string { return db.connString }

// Conn is the harness's own connection to the template database, the one
// Func hands over. Use it from the setup func's goroutine only.
func (db *SetupDB) Conn() *pgx.Conn { return db.conn }

// Pool is a pgx pool on the template database (River's and tern's
// migrators take one), the same pool on every call, closed when the setup
// func returns.
func (db *SetupDB) Pool(ctx context.Context) (*pgxpool.Pool, error) {
	return openOnce(db, &db.pool, func() (*pgxpool.Pool, error) {
		cfg, err := pgxpool.ParseConfig(db.ConnString())
		if err != nil {
			return nil, err
		}
		return pgxpool.NewWithConfig(ctx, cfg)
	})
}

// SQL is a *sql.DB on the template database through pgx's database/sql
// driver (golang-migrate, goose, sqlx), the same one on every call, closed
// when the setup func returns.
func (db *SetupDB) SQL() (*sql.DB, error) {
	return openOnce(db, &db.sqlDB, func() (*sql.DB, error) {
		cfg, err := pgx.ParseConfig(db.ConnString())
		if err != nil {
			return nil, err
		}
		return stdlib.OpenDB(*cfg), nil
	})
}

// openOnce returns *held, which open opens on the first call, under db.mu;
// an error once the setup func has returned and db is closed.
func openOnce[H comparable](db *SetupDB, held *H, open func() (H, error)) (H, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	var none H
	switch {
	case db.closed:
		return none, errSetupDBClosed
	case *held != none:
		return *held, nil
	}
	h, err := open()
	if err != nil {
		return none, err
	}
	*held = h
	return h, nil
}

// closeGrace bounds how long close waits for the pool and the *sql.DB:
// both wait for connections still in use (a library that never released
// one), and the template's leftover sessions are terminated anyway.
const closeGrace = 5 * time.Second

func (db *SetupDB) close() {
	db.mu.Lock()
	db.closed = true
	pool, sqlDB := db.pool, db.sqlDB
	db.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if pool != nil {
			pool.Close()
		}
		if sqlDB != nil {
			_ = sqlDB.Close()
		}
	}()
	t := time.NewTimer(closeGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// queueSteps are the setup steps of the schema q carries, which the
// harness applies before Config.Setup (none for a nil q).
func queueSteps(job string, q queue.Queue) ([]freshdb.Step, error) {
	if q == nil {
		return nil, nil
	}
	s := q.Schema()
	if s.Apply != nil && s.Name == "" {
		return nil, blame.Userf("job %q: its queue %T's Schema has an Apply func but no Name; the Name keys the template database, so give the schema one", job, q)
	}
	name := cmp.Or(s.Name, fmt.Sprintf("%T", q))
	var steps []freshdb.Step
	if s.SQL != "" {
		steps = append(steps, freshdb.Step{Name: "queue schema SQL: " + name, SQL: s.SQL})
	}
	if s.Apply != nil {
		// The template's key sees a func only by this name.
		steps = append(steps, freshdb.Step{Name: "queue schema: " + name, Func: s.Apply})
	}
	return steps, nil
}

// keptFuncs holds every func funcKey has keyed, for the life of the
// process (as long as the templates they built): a closure freed by the
// GC could otherwise be followed by another at the same address, which
// would then share the first one's template.
var keptFuncs sync.Map

// funcKey is fn's identity in this process: the address of its func value
// (the closure record), which differs between closures of one literal that
// capture variables and is the same static record for a top-level func or
// a literal that captures nothing. reflect's Pointer gives only the code,
// shared by all closures of a literal, hence the unsafe read.
func funcKey[F any](fn F) string {
	p := *(*unsafe.Pointer)(unsafe.Pointer(&fn))
	keptFuncs.LoadOrStore(p, fn)
	return strconv.FormatUint(uint64(uintptr(p)), 16)
}
