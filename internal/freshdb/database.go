package freshdb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Database is a fresh database handed out by Fresh: a copy of its template,
// used by nobody else until it is dropped. Open any number of connections
// with ConnString.
type Database struct {
	Name       string // twice_<run ID>_d<n>; twice_kept_<run ID>_<n> after Keep
	ConnString string // admin credentials, as the Server gives them

	tpl   *Template
	mu    sync.Mutex
	state dbState
	admin *pgx.Conn // reuse mode: kept open for fast resets and snapshots
	// restored holds, per table of tpl.reset, the ID of the transaction
	// that last wrote the template's rows into it; 0 until a reset has.
	restored []uint32
}

type dbState int

const (
	inUse dbState = iota
	idle
	kept
	dropped
)

// Fresh hands out a database identical to the template, exclusively the
// caller's until Drop. Call Drop when done (or Keep to leave it for a human).
//
// Under the default strategy it is a clone that an earlier Drop reset in
// place, or a new clone (CREATE DATABASE ... TEMPLATE) when none is idle.
func (t *Template) Fresh(ctx context.Context) (*Database, error) {
	t.mu.Lock()
	if n := len(t.idle); n > 0 {
		d := t.idle[n-1]
		t.idle = t.idle[:n-1]
		t.mu.Unlock()
		d.mu.Lock()
		d.state = inUse
		d.mu.Unlock()
		return d, nil
	}
	t.mu.Unlock()
	return t.clone(ctx)
}

func (t *Template) clone(ctx context.Context) (_ *Database, err error) {
	r := t.r
	name := fmt.Sprintf("%sd%d", RunPrefix(), r.seq.Add(1))
	stmt := "CREATE DATABASE " + quote(name) + " TEMPLATE " + quote(t.Name)
	if t.strategy != "" {
		stmt += " STRATEGY " + t.strategy
	}
	if err := r.create(ctx, name, stmt); err != nil {
		if templateInUse(err) {
			return nil, t.inUseError(ctx, err)
		}
		return nil, fmt.Errorf("creating database %s from template %s: %w", name, t.Name, err)
	}
	d := &Database{Name: name, ConnString: r.srv.ConnString(name), tpl: t}
	if t.mode != modeReuse {
		return d, nil
	}
	defer func() {
		if err != nil {
			d.closeAdmin(ctx)
			_ = r.drop(context.WithoutCancel(ctx), name)
		}
	}()
	d.admin, err = pgx.Connect(ctx, d.ConnString)
	if err != nil {
		return nil, fmt.Errorf("connecting to new database %s: %w", name, err)
	}
	// The reset needs replica mode (no triggers, no foreign key checks).
	// Set for the session once, the reset's SET LOCAL changes nothing;
	// changing it would flush the connection's cached plans (PostgreSQL
	// does on every change), and the fingerprint and the snapshots'
	// statements would be planned anew for every scenario.
	if _, err := d.admin.Exec(ctx, "SET session_replication_role = replica"); err != nil {
		return nil, fmt.Errorf("setting up the connection to new database %s: %w", name, err)
	}
	fp, err := fingerprint(ctx, d.admin)
	if err != nil {
		return nil, err
	}
	var quick string
	if t.logged {
		if err := d.admin.QueryRow(ctx, quickSQL).Scan(&quick); err != nil {
			return nil, fmt.Errorf("reading the change log's state in new database %s: %w", name, err)
		}
	}
	t.mu.Lock()
	if t.fingerprint == "" {
		t.fingerprint, t.quick = fp, quick
	}
	same := t.fingerprint == fp && t.quick == quick
	t.mu.Unlock()
	if !same {
		return nil, fmt.Errorf("new database %s differs in its catalog from earlier clones of %s", name, t.Name)
	}
	return d, nil
}

// fingerprint reads the catalog fingerprint as a prepared statement, whose
// plan the connection keeps: planning it costs several times running it.
func fingerprint(ctx context.Context, conn *pgx.Conn) (string, error) {
	var fp string
	if err := conn.QueryRow(ctx, fingerprintSQL).Scan(&fp); err != nil {
		return "", fmt.Errorf("reading catalog fingerprint: %w", err)
	}
	return fp, nil
}

// Drop gives the database back: the caller and every session it opened must
// be done with it (sessions still open are closed). Under the default
// strategy the database is reset in place and handed out again by a later
// Fresh; otherwise it is dropped. Drop refuses a Database this run did not
// create (a name outside twice_<run ID>_...). Dropping twice, or dropping a
// kept database, does nothing.
func (d *Database) Drop(ctx context.Context) error {
	return d.DropSparing(ctx, nil)
}

// DropSparing is Drop, except that a reset in place leaves alone the
// sessions whose backend PIDs are in spare, where Drop ends every session
// in the database: idle sessions the caller keeps for the database's next
// use, which must hold no transaction, no lock and no session state that
// matters (a pool of connections reset with DISCARD ALL). A database that
// is dropped instead ends them with the rest.
func (d *Database) DropSparing(ctx context.Context, spare []uint32) error {
	if d == nil || d.tpl == nil {
		return refuseDrop(d)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.state == kept || d.state == dropped:
		return nil
	case !d.tpl.r.owns(d.Name):
		return refuseDrop(d)
	case d.state == idle:
		return fmt.Errorf("database %s was already given back", d.Name)
	}
	t := d.tpl
	if t.mode == modeReuse && d.admin != nil && d.reset(ctx, spare) == nil {
		d.state = idle
		t.mu.Lock()
		t.idle = append(t.idle, d)
		t.mu.Unlock()
		return nil
	}
	// A database that cannot be reset is replaced by a new clone later.
	d.closeAdmin(ctx)
	d.state = dropped
	return t.r.drop(context.WithoutCancel(ctx), d.Name)
}

// errChanged means a handler changed the schema; the database is replaced.
var errChanged = errors.New("catalog changed")

func (d *Database) reset(ctx context.Context, spare []uint32) error {
	p := d.tpl.reset
	if p == nil {
		return errors.New("the template cannot be reset in place")
	}
	if d.tpl.logged {
		return d.resetLogged(ctx, p, spare)
	}
	if err := closeOthers(ctx, d.admin, d.Name, spare); err != nil {
		return err
	}
	if d.restored == nil {
		d.restored = make([]uint32, len(p.tables))
	}
	// Only the tables a scenario wrote are reset: the others hold what the
	// last reset wrote, and rewriting every row of a big fixture would
	// cost more than reading it.
	var written []int
	if q := p.writtenSQL(d.restored); q != "" {
		res, err := d.admin.PgConn().Exec(ctx, q).ReadAll()
		if err != nil {
			return err
		}
		for _, row := range res[0].Rows {
			i, err := strconv.Atoi(string(row[0]))
			if err != nil || i < 0 || i >= len(p.tables) {
				return fmt.Errorf("listing the tables written: table %q", row[0])
			}
			written = append(written, i)
		}
	}
	for i, t := range p.tables {
		if t.rows > 0 && d.restored[i] == 0 {
			written = append(written, i)
		}
	}
	slices.Sort(written)
	res, err := d.admin.PgConn().Exec(ctx, p.script(written, false)).ReadAll()
	if err != nil {
		return err
	}
	fp, err := fingerprint(ctx, d.admin)
	if err != nil {
		return err
	}
	d.tpl.mu.Lock()
	want := d.tpl.fingerprint
	d.tpl.mu.Unlock()
	if fp != want {
		return errChanged
	}
	// The script's results end with its transaction's ID and COMMIT.
	if len(res) < 2 || len(res[len(res)-2].Rows) != 1 {
		return fmt.Errorf("reset: no transaction ID among its %d results", len(res))
	}
	xid8, err := strconv.ParseUint(string(res[len(res)-2].Rows[0][0]), 10, 64)
	if err != nil {
		return fmt.Errorf("reset: transaction ID: %w", err)
	}
	for _, i := range written {
		d.restored[i] = uint32(xid8) // xid8 is the epoch and the xid
	}
	return nil
}

// resetLogged resets, with the template's change log, exactly the tables
// written since the last reset (or the clone): the log says which, in the
// round trip that checks the catalog (quickSQL). No other session was
// there when the log was read, or it has ended since and the log was
// read again (closeOthers), so nothing writes between that read and the
// reset, and the reset itself runs no DDL.
func (d *Database) resetLogged(ctx context.Context, p *resetPlan, spare []uint32) error {
	// The common case, no session but the spared ones, costs one round
	// trip with the change log's read; a session found is ended and
	// waited for, and the log read again, since it could have committed
	// after the first read.
	ch, others, err := d.readChangedAlone(ctx, spare)
	if err == nil && others > 0 {
		if err = closeOthers(ctx, d.admin, d.Name, spare); err == nil {
			ch, err = d.readChanged(ctx)
		}
	}
	if err != nil {
		return err
	}
	if !ch.Known {
		return errChanged
	}
	var written []int
	for oid := range ch.oids {
		if i, ok := p.byOID[oid]; ok {
			written = append(written, i)
		}
	}
	slices.Sort(written)
	_, err = d.admin.PgConn().Exec(ctx, p.script(written, true)).ReadAll()
	return err
}

// TableID names a table by schema and name, as the catalog spells them.
type TableID struct{ Schema, Name string }

// Changed is what the server says a database's handlers wrote since it
// was handed out.
type Changed struct {
	// Known is false when the server cannot tell: the template has no
	// change log (not a superuser), the harness keeps no connection to
	// the database, or a handler ran DDL (a new table, a dropped or
	// disabled trigger; the template's event triggers note it), or wrote
	// what DDL's log cannot see (a large object, the database's
	// settings). Then every table must be taken as changed.
	Known bool
	// Tables are the tables with a row written, those under them and
	// those over them (partitioned and inheritance parents, whose rows
	// include their children's).
	Tables map[TableID]bool
	oids   map[uint32]bool
}

// Changed reads from the template's change log which tables were written
// since the database was handed out, in one round trip on the kept
// connection: every INSERT, UPDATE, DELETE, TRUNCATE or COPY that
// committed, however it ran (a function, a trigger, a foreign key
// action). Writes still uncommitted, or rolled back, are not listed.
// Sequences are not tables and never listed: compare them always. Use it
// between deliveries, like Query.
func (d *Database) Changed(ctx context.Context) (Changed, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.tpl.logged || d.admin == nil {
		return Changed{}, nil
	}
	return d.readChanged(ctx)
}

// readChanged is Changed, under d.mu, with d.admin open. The catalog
// check is quickSQL, not the fingerprint: its cost does not grow with
// the tables of the schema.
func (d *Database) readChanged(ctx context.Context) (Changed, error) {
	b := &pgx.Batch{}
	b.Queue(quickSQL)
	b.Queue(changedSQL)
	br := d.admin.SendBatch(ctx, b)
	defer func() { _ = br.Close() }()
	return d.scanChanged(br)
}

// readChangedAlone is readChanged after closeOthers's first question in
// the same round trip: it terminates the sessions in the database but
// d.admin's and spare's, and says how many there were. With none, the
// change log was read with no session left to commit.
func (d *Database) readChangedAlone(ctx context.Context, spare []uint32) (_ Changed, others int64, _ error) {
	b := &pgx.Batch{}
	b.Queue(othersSQL, true, sparedPIDs(spare))
	b.Queue(quickSQL)
	b.Queue(changedSQL)
	br := d.admin.SendBatch(ctx, b)
	defer func() { _ = br.Close() }()
	if err := br.QueryRow().Scan(&others); err != nil {
		return Changed{}, 0, err
	}
	ch, err := d.scanChanged(br)
	return ch, others, err
}

// scanChanged reads quickSQL's and changedSQL's answers from br.
func (d *Database) scanChanged(br pgx.BatchResults) (Changed, error) {
	var quick string
	if err := br.QueryRow().Scan(&quick); err != nil {
		return Changed{}, fmt.Errorf("reading the change log's state: %w", err)
	}
	d.tpl.mu.Lock()
	want := d.tpl.quick
	d.tpl.mu.Unlock()
	if quick != want {
		return Changed{}, nil
	}
	rows, err := br.Query()
	if err != nil {
		return Changed{}, fmt.Errorf("reading the change log: %w", err)
	}
	ch := Changed{Known: true, Tables: map[TableID]bool{}, oids: map[uint32]bool{}}
	for rows.Next() {
		var oid int64
		var id TableID
		if err := rows.Scan(&oid, &id.Schema, &id.Name); err != nil {
			rows.Close()
			return Changed{}, fmt.Errorf("reading the change log: %w", err)
		}
		ch.Tables[id] = true
		ch.oids[uint32(oid)] = true
	}
	if err := rows.Err(); err != nil {
		return Changed{}, fmt.Errorf("reading the change log: %w", err)
	}
	return ch, nil
}

// Written counts the rows written since the database was handed out, as
// the write history (twice.history) holds them: every row an INSERT,
// UPDATE, DELETE or TRUNCATE wrote and committed, however it ran, by any
// backend but those in except (the queue's own connection). known is
// false when the template has no history (the server's user is not a
// superuser). Use it between deliveries, like Query.
func (d *Database) Written(ctx context.Context, except ...uint32) (n int64, known bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.tpl.history || d.admin == nil {
		return 0, false, nil
	}
	pids := pidArgs(except)
	if err := d.admin.QueryRow(ctx, `SELECT count(*) FROM twice.history WHERE pid <> ALL($1)`, pids).Scan(&n); err != nil {
		return 0, false, fmt.Errorf("reading the write history of %s: %w", d.Name, err)
	}
	return n, true, nil
}

// pidArgs is except as a query's int4[] argument.
func pidArgs(except []uint32) []int32 {
	pids := make([]int32, len(except))
	for i, p := range except {
		pids[i] = int32(p)
	}
	return pids
}

// Write is one row a committed statement wrote, as the write history
// holds it.
type Write struct {
	// Table is the table, named as snapshots name it: qualified by its
	// schema outside public.
	Table string
	// Op is 'I', 'U' or 'D': an insert, an update, a delete.
	Op byte
	// Key is the row's primary key, its columns' text joined with ",";
	// empty when the table has none.
	Key string
	// Old and New are the row before and after (nil for an insert's Old
	// and a delete's New), column by column as to_jsonb gives them.
	Old, New map[string]any
	// PID is the backend that wrote it; At and Query are the start and
	// text of the client statement that did (a trigger's or function's
	// write is its statement's): rows with one PID and At are one
	// statement's.
	PID   uint32
	At    time.Time
	Query string
}

// historySQL reads the write history in the order it was written, with
// each row's primary key from its new image (its old one for a delete).
const historySQL = `SELECT CASE WHEN n.nspname = 'public' THEN c.relname ELSE n.nspname || '.' || c.relname END, h.op::text,
	coalesce((SELECT string_agg(coalesce(h.new, h.old) ->> a.attname, ',' ORDER BY k.ord)
		FROM pg_index i CROSS JOIN unnest(i.indkey) WITH ORDINALITY k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indrelid = h.rel AND i.indisprimary), ''),
	h.old, h.new, h.pid, h.at, coalesce(h.query, '')
FROM twice.history h JOIN pg_class c ON c.oid = h.rel JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE h.pid <> ALL($1) ORDER BY h.seq`

// History reads the write history since the database was handed out:
// every row a committed statement wrote, in order, by any backend but
// those in except (the queue's own connection). known is false when the
// template has none. Use it between deliveries, like Query.
func (d *Database) History(ctx context.Context, except ...uint32) (_ []Write, known bool, _ error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.tpl.history || d.admin == nil {
		return nil, false, nil
	}
	pids := pidArgs(except)
	rows, err := d.admin.Query(ctx, historySQL, pids)
	if err != nil {
		return nil, false, fmt.Errorf("reading the write history of %s: %w", d.Name, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Write, error) {
		var w Write
		var op string
		var pid int32
		err := row.Scan(&w.Table, &op, &w.Key, &w.Old, &w.New, &pid, &w.At, &w.Query)
		w.PID = uint32(pid)
		if len(op) == 1 {
			w.Op = op[0]
		}
		return w, err
	})
	if err != nil {
		return nil, false, fmt.Errorf("reading the write history of %s: %w", d.Name, err)
	}
	return out, true, nil
}

// closeOthers ends every session but conn's and spare's in conn's
// database, name, and waits until they are gone, so none can commit after
// a reset has read the tables. The query is a prepared statement: it runs a
// few times per reset.
func closeOthers(ctx context.Context, conn *pgx.Conn, name string, spare []uint32) error {
	spared := sparedPIDs(spare)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for terminate := true; ; terminate = false {
		var others int64
		if err := conn.QueryRow(ctx, othersSQL, terminate, spared).Scan(&others); err != nil {
			return err
		}
		if others == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sessions in %s did not end: %w", name, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// sparedPIDs is spare as othersSQL takes it: never nil, since
// pid <> ALL(NULL) is NULL.
func sparedPIDs(spare []uint32) []int64 {
	spared := make([]int64, len(spare))
	for i, pid := range spare {
		spared[i] = int64(pid)
	}
	return spared
}

// ErrNoConn is what Query returns for a database the harness keeps no
// connection to (one clone per scenario, when clones cannot be reused).
var ErrNoConn = errors.New("no kept connection to this database")

// Query runs a query on the harness's own connection to the database, kept
// open across hand-outs so the server's catalog caches stay warm: it makes
// snapshots between deliveries cheap. Handlers never use it. It runs with
// session_replication_role = replica, as the reset needs: it is for
// reading (no trigger, no foreign key check would fire on a write). It returns
// ErrNoConn when no connection is kept; open one with ConnString then.
func (d *Database) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	d.mu.Lock()
	conn := d.admin
	d.mu.Unlock()
	if conn == nil {
		return nil, ErrNoConn
	}
	return conn.Query(ctx, sql, args...)
}

// KeptConn is the harness's own connection to the database that Query
// uses (in replica mode, for reading), or nil when none is kept. It sends a pgx.Batch in one round trip,
// as Query cannot. Like Query, it is for the harness between deliveries:
// use it from one goroutine at a time, and never close it (Drop does).
func (d *Database) KeptConn() *pgx.Conn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.admin
}

// Template is the template d was made from.
func (d *Database) Template() *Template { return d.tpl }

// Keep leaves the database on the server for a human to inspect and takes it
// out of this run's hands: it is renamed to twice_kept_<run ID>_<n> (Name
// and ConnString change accordingly; sessions still open in it are closed
// first), which no cleanup (Drop, DropAll, CleanStale, a RunPrefix-based
// watchdog) ever drops. Drop it by hand when done:
//
//	psql "<ConnString of another database>" -c 'DROP DATABASE "twice_kept_..."'
//
// Not calling Drop is not enough to keep a database: a reset in place, DropAll
// or a watchdog would remove it.
func (d *Database) Keep(ctx context.Context) error {
	if d == nil || d.tpl == nil || !d.tpl.r.owns(d.Name) {
		return fmt.Errorf("refusing to keep database %q: this run did not create it or already gave it up", d.nameOrEmpty())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state != inUse {
		return fmt.Errorf("keep database %s: it was already given back", d.Name)
	}
	r := d.tpl.r
	d.closeAdmin(ctx)
	n := r.seq.Add(1)
	newName := keptName(n)
	// Sessions left in it (the caller's, after a failure) would block the rename.
	if _, err := r.admin.Exec(ctx, "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = $1", d.Name); err != nil {
		return fmt.Errorf("keeping database %s (closing its sessions): %w", d.Name, err)
	}
	if _, err := r.admin.Exec(ctx, "ALTER DATABASE "+quote(d.Name)+" RENAME TO "+quote(newName)); err != nil {
		return fmt.Errorf("keeping database %s (renaming it to %s): %w", d.Name, newName, err)
	}
	r.mu.Lock()
	delete(r.owned, d.Name)
	r.mu.Unlock()
	d.Name = newName
	d.ConnString = r.srv.ConnString(newName)
	d.state = kept
	return nil
}

func refuseDrop(d *Database) error {
	return fmt.Errorf("refusing to drop database %q: this run (%s*) did not create it", d.nameOrEmpty(), RunPrefix())
}

func (d *Database) nameOrEmpty() string {
	if d == nil {
		return ""
	}
	return d.Name
}

func (d *Database) closeAdmin(ctx context.Context) {
	if d.admin != nil {
		_ = d.admin.Close(context.WithoutCancel(ctx))
		d.admin = nil
	}
}
