package freshdb

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/history"
)

// How Fresh makes a database.
type mode int

const (
	// modeReuse hands out a pooled clone that Drop reset in place (the
	// benchmarked default); a database that cannot be reset is dropped and
	// replaced by a new clone.
	modeReuse mode = iota
	// modeClone makes a new clone per Fresh and drops it on Drop.
	modeClone
)

// Template is a template database built from steps, from which Fresh makes
// databases. It is safe for concurrent use. It lives as long as the process
// (or until DropAll).
type Template struct {
	// Name is the template database's name (twice_<run ID>_t<hash>).
	Name string

	r        *run
	mode     mode
	strategy string     // CREATE DATABASE ... STRATEGY, "" for the server default
	reset    *resetPlan // how a clone is reset in place; nil when it cannot be
	why      string     // why reuse is impossible, for docs and tests
	// logged says the template has the change log (changeLogSQL): every
	// statement that writes a table notes it in twice.changed.
	logged bool
	// history says it has the write history too: every row written is
	// noted in twice.history (all but WithoutHistory's templates).
	history bool

	mu          sync.Mutex
	idle        []*Database
	fingerprint string // catalog fingerprint of a fresh clone, set by the first clone
	quick       string // quickSQL of a fresh clone, set by the first clone; logged only
}

// Prepare builds the template database for steps on srv, once per server and
// content hash per process: a later or concurrent Prepare with the same
// content shares that build (concurrent callers wait for it). The hash covers
// SQL steps by their text and Func steps by their Name and Key only, so two
// different funcs must not share both. Steps run in order on a new database created
// from template0; a failing step drops it and the error names the step and,
// for SQL, the line:column the server pointed at.
//
// The first use of a server also drops databases left there by dead runs
// (see CleanStale).
func Prepare(ctx context.Context, srv Server, steps []Step) (*Template, error) {
	if err := checkSteps(steps); err != nil {
		return nil, err
	}
	r, err := runFor(ctx, srv)
	if err != nil {
		return nil, err
	}
	hash := hashSteps(steps)
	return startShared(ctx, &r.mu, r.templates, hash, "the template database to be built", func() (*Template, error) { return r.buildTemplate(ctx, hash, steps) })
}

func (r *run) buildTemplate(ctx context.Context, hash string, steps []Step) (t *Template, err error) {
	name := RunPrefix() + "t" + hash[:16]
	if err := r.create(ctx, name, "CREATE DATABASE "+quote(name)+" TEMPLATE template0"); err != nil {
		return nil, fmt.Errorf("creating template database %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			_ = r.drop(context.WithoutCancel(ctx), name)
		}
	}()
	conn, err := pgx.Connect(ctx, r.srv.ConnString(name))
	if err != nil {
		return nil, fmt.Errorf("connecting to template database %s: %w", name, err)
	}
	abandoned := false
	defer func() {
		if !abandoned {
			_ = conn.Close(context.WithoutCancel(ctx))
		}
	}()
	for _, s := range steps {
		// On error the deferred drop (WITH FORCE) ends the step's sessions,
		// which frees an abandoned step blocked on the server.
		if abandoned, err = r.runStepWithin(ctx, name, conn, s); err != nil {
			if ctx.Err() == nil {
				err = blame.User(err) // the step's SQL or func failed, or hung
			}
			return nil, err
		}
	}
	// Sessions a setup left open (a migration library's pool) would make
	// every clone fail: the template must have none.
	if err := closeOthers(ctx, conn, name, nil); err != nil {
		return nil, fmt.Errorf("closing the sessions setup steps left open in template database %s: %w", name, err)
	}
	t = &Template{Name: name, r: r, mode: modeReuse}
	if r.version >= 150000 {
		t.strategy = defaultStrategy
	}
	if r.superuser {
		// A trigger on a table someone else owns needs a superuser.
		if _, err := conn.PgConn().Exec(ctx, changeLogSQL).ReadAll(); err != nil {
			return nil, fmt.Errorf("installing the change log in template database %s: %w", name, err)
		}
		t.logged, t.history = true, !withoutHistory.Load()
		if !t.history {
			if _, err := conn.Exec(ctx, dropHistorySQL); err != nil {
				return nil, fmt.Errorf("leaving the write history out of template database %s: %w", name, err)
			}
		}
	}
	t.reset, t.why, err = resetScript(ctx, conn, r, t.history)
	if err != nil {
		return nil, err
	}
	if t.reset == nil {
		t.mode = modeClone
	}
	return t, nil
}

// changeLogSQL installs the change log in a template: a statement-level
// AFTER trigger on every table (partitions and the reserved schema's
// included) appends the table's OID to twice.changed for every INSERT,
// UPDATE, DELETE, TRUNCATE (and COPY, MERGE, foreign key actions, writes
// from functions and other triggers) that completes, in the writer's
// transaction: a rolled-back write leaves no note, as it leaves no row.
// The log is a plain heap without index, so concurrent writers never
// wait on each other for it, and unlogged, as are the history and the DDL
// log below: they live as long as a scenario, and writing them to the WAL
// would only slow every write a job makes. It is the harness's, not the job's: the
// reset runs with session_replication_role = replica, which fires no
// ordinary trigger, and empties it; snapshots leave the reserved schema
// out.
//
// The write history, twice.history, is the same log row by row: a row-level
// AFTER trigger on the same tables appends, for every row an INSERT,
// UPDATE or DELETE wrote (COPY, MERGE, a function's or a trigger's
// write, a foreign key action included), the backend that wrote it, the
// table, the operation and the row's old and new image, in the writer's
// transaction: what a run committed, row by row (Database.Written), with
// the client statement that wrote it (its start, statement_timestamp(),
// and text, current_query(): a trigger's or function's write is the
// statement's that set it off), which tells the delivery and step that
// wrote each row (execute.Output.History).
// A TRUNCATE fires no row trigger: a statement-level BEFORE TRUNCATE
// trigger notes every row it is about to remove as a delete, with its old
// image, so the history holds every row a run took away however it did.
// Triggers show
// in pg_trigger, in every clone alike, so the catalog
// fingerprint of a clone still matches the template's; DDL that drops or
// disables one changes it, and then nothing relies on the log.
//
// A second log, twice.ddl, notes DDL: event triggers, enabled ALWAYS so
// that session_replication_role = replica does not silence them, note
// every command they see but those on temporary objects (which the
// catalog fingerprint leaves out too). An empty twice.ddl, with the event
// triggers, their functions and what event triggers cannot see (large
// objects, the database's settings) as in a fresh clone, says the catalog
// is the template's (quickSQL), in a few index lookups where the full
// fingerprint reads every catalog row of every table. Event triggers are
// created last: the change log's own CREATE TRIGGERs are not noted.
const changeLogSQL = `
CREATE SCHEMA IF NOT EXISTS twice;
CREATE UNLOGGED TABLE twice.changed (rel oid NOT NULL);
CREATE FUNCTION twice.note_changed() RETURNS trigger LANGUAGE plpgsql
	SECURITY DEFINER SET search_path = pg_catalog
	AS $$BEGIN INSERT INTO twice.changed VALUES (TG_RELID); RETURN NULL; END$$;
CREATE UNLOGGED TABLE twice.history (pid int NOT NULL, rel oid NOT NULL, op "char" NOT NULL, old jsonb, new jsonb,
	seq bigint GENERATED ALWAYS AS IDENTITY,
	at timestamptz NOT NULL DEFAULT statement_timestamp(), query text DEFAULT current_query());
CREATE FUNCTION twice.note_row() RETURNS trigger LANGUAGE plpgsql
	SECURITY DEFINER SET search_path = pg_catalog
	AS $$BEGIN
		IF TG_OP = 'INSERT' THEN
			INSERT INTO twice.history VALUES (pg_backend_pid(), TG_RELID, 'I', NULL, to_jsonb(NEW));
		ELSIF TG_OP = 'UPDATE' THEN
			INSERT INTO twice.history VALUES (pg_backend_pid(), TG_RELID, 'U', to_jsonb(OLD), to_jsonb(NEW));
		ELSE
			INSERT INTO twice.history VALUES (pg_backend_pid(), TG_RELID, 'D', to_jsonb(OLD), NULL);
		END IF;
		RETURN NULL;
	END$$;
CREATE FUNCTION twice.note_truncate() RETURNS trigger LANGUAGE plpgsql
	SECURITY DEFINER SET search_path = pg_catalog
	AS $$BEGIN
		EXECUTE format('INSERT INTO twice.history (pid, rel, op, old) SELECT pg_backend_pid(), %s, ''D'', to_jsonb(x) FROM ONLY %s x',
			TG_RELID, TG_RELID::regclass);
		RETURN NULL;
	END$$;
DO $$
DECLARE r regclass; kind "char";
BEGIN
	FOR r, kind IN SELECT c.oid, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p') AND c.relpersistence <> 't' AND c.oid >= 16384
		  AND c.oid NOT IN ('twice.changed'::regclass, 'twice.history'::regclass)
		  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%'
	LOOP
		EXECUTE format('CREATE TRIGGER twice_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION twice.note_changed()', r);
		-- Rows live in the leaves: a partitioned table's row trigger would
		-- be cloned onto partitions that get their own.
		IF kind = 'r' THEN
			EXECUTE format('CREATE TRIGGER twice_history AFTER INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW EXECUTE FUNCTION twice.note_row()', r);
			EXECUTE format('CREATE TRIGGER twice_truncate BEFORE TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION twice.note_truncate()', r);
		END IF;
	END LOOP;
END$$;
CREATE UNLOGGED TABLE twice.ddl (tag text NOT NULL);
CREATE FUNCTION twice.note_ddl() RETURNS event_trigger LANGUAGE plpgsql
	SECURITY DEFINER SET search_path = pg_catalog
	AS $$BEGIN
		-- A DROP is noted by note_drop, which can tell temporary objects.
		IF TG_TAG LIKE 'DROP %' THEN RETURN; END IF;
		IF EXISTS (SELECT FROM pg_event_trigger_ddl_commands() WHERE schema_name IS DISTINCT FROM 'pg_temp')
		   OR NOT EXISTS (SELECT FROM pg_event_trigger_ddl_commands()) THEN
			INSERT INTO twice.ddl VALUES (TG_TAG);
		END IF;
	END$$;
CREATE FUNCTION twice.note_drop() RETURNS event_trigger LANGUAGE plpgsql
	SECURITY DEFINER SET search_path = pg_catalog
	AS $$BEGIN
		IF EXISTS (SELECT FROM pg_event_trigger_dropped_objects() WHERE NOT is_temporary) THEN
			INSERT INTO twice.ddl VALUES (TG_TAG);
		END IF;
	END$$;
CREATE EVENT TRIGGER twice_ddl ON ddl_command_end EXECUTE FUNCTION twice.note_ddl();
CREATE EVENT TRIGGER twice_drop ON sql_drop EXECUTE FUNCTION twice.note_drop();
ALTER EVENT TRIGGER twice_ddl ENABLE ALWAYS;
ALTER EVENT TRIGGER twice_drop ENABLE ALWAYS;`

// withoutHistory, set by WithoutHistory, leaves the write history out of
// the templates prepared meanwhile.
var withoutHistory atomic.Bool

// WithoutHistory makes the templates prepared until restore is called
// keep the change log but no write history, as if the history were not
// there: Written and History say they cannot tell, and no table is reset
// or read through it. It is for measuring what the history costs
// (harness's BenchmarkHistoryCost); give such templates setup steps of
// their own, since a run reuses a template prepared from the same steps.
func WithoutHistory() (restore func()) {
	withoutHistory.Store(true)
	return func() { withoutHistory.Store(false) }
}

// dropHistorySQL removes the write history's triggers (WithoutHistory).
const dropHistorySQL = `DO $$
DECLARE r regclass;
BEGIN
	FOR r IN SELECT tgrelid::regclass FROM pg_trigger WHERE tgname = 'twice_history' LOOP
		EXECUTE format('DROP TRIGGER twice_history ON %s; DROP TRIGGER twice_truncate ON %s', r, r);
	END LOOP;
END$$`

// quickSQL is what says, with the change log, that a clone's catalog is
// still the template's: the DDL noted (none), and what notes it or cannot
// be noted, each read through an index or from a table a schema of many
// tables does not grow: a clone whose quickSQL matches the first clone's
// has the template's catalog, as fingerprintSQL would tell at a cost
// that grows with the number of tables. Only for a template with the
// change log.
const quickSQL = `SELECT concat_ws(' ',
	'ddl:' || (SELECT count(*) FROM twice.ddl),
	'evt:' || (SELECT count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_event_trigger),
	'proc:' || (SELECT count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_proc
		WHERE oid IN (to_regprocedure('twice.note_changed()'), to_regprocedure('twice.note_row()'), to_regprocedure('twice.note_ddl()'), to_regprocedure('twice.note_drop()'))),
	'lo:' || (SELECT count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_largeobject_metadata),
	'dbset:' || (SELECT count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_db_role_setting
		WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())))`

// changedSQL lists the tables written since the template or the last
// reset, from the change log: each noted table, the tables under it
// (a write through a partitioned or inheritance parent lands in its
// children) and then the tables over those (a parent's snapshot holds
// its children's rows), by OID and by schema and name. Each name is
// looked up by OID (OFFSET 0 keeps the lookup from being flattened into
// a join, which the planner makes a hash join over all of pg_class: 1,400
// rows at 200 tables, for the one or two a scenario writes).
const changedSQL = `WITH RECURSIVE noted AS (SELECT DISTINCT rel FROM twice.changed),
down(rel) AS (SELECT rel FROM noted UNION SELECT i.inhrelid FROM pg_inherits i JOIN down ON i.inhparent = down.rel),
up(rel) AS (SELECT rel FROM down UNION SELECT i.inhparent FROM pg_inherits i JOIN up ON i.inhrelid = up.rel)
SELECT c.oid::int8, c.nspname, c.relname FROM up CROSS JOIN LATERAL (
	SELECT c.oid, n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = up.rel OFFSET 0) c`

// defaultStrategy is the CREATE DATABASE strategy for clones (PostgreSQL
// 15+), chosen by BenchmarkHandOut.
const defaultStrategy = "FILE_COPY"

// resetPlan is how a clone of the template is put back to the template's
// content: per table the template's row count and the statement that
// reinserts its rows, and the statements that set every sequence back.
type resetPlan struct {
	tables  []resetTable
	byOID   map[uint32]int // index in tables
	setvals string
}

type resetTable struct {
	oid    uint32
	name   string // quoted, qualified
	rows   int64  // the template's
	insert string // reinserts the template's rows; "" when it has none
	// undo, for a big table the write history can read back, puts back
	// only the rows written (history.Table.Undo), in place of the
	// delete and insert of every row; insert is "" then.
	undo string
}

// undoFrom is the size (pg_relation_size, the main fork) from which a
// template's table with a primary key is reset in place by putting back
// only the rows the write history says were written, and snapshots read
// only those rows: below it, emptying and refilling the table, or
// reading it whole, costs less than finding them. A var for tests.
var undoFrom int64 = 1 << 20

// Undone lists the tables (qualified, quoted where needed) whose rows a reset puts back
// through the write history, only those written: the big ones. A dump
// kept as evidence leaves their rows out; the history holds the rows a
// scenario wrote.
func (t *Template) Undone() []string {
	if t.reset == nil {
		return nil
	}
	var out []string
	for _, rt := range t.reset.tables {
		if rt.undo != "" {
			out = append(out, rt.name)
		}
	}
	return out
}

// UndoFrom is the size from which a table with a primary key is reset,
// and should be read, through the template's write history (only the
// rows written); 0 when the template has no history.
func (t *Template) UndoFrom() int64 {
	if !t.history {
		return 0
	}
	return undoFrom
}

// resetScript plans the reset of a clone of the template conn is
// connected to; logsRows says the template keeps the write history, through
// which big tables are reset. why says why a database cannot be reset in
// place (then plan is nil).
func resetScript(ctx context.Context, conn *pgx.Conn, r *run, logsRows bool) (plan *resetPlan, why string, err error) {
	switch {
	case !r.superuser:
		// Triggers and foreign keys must be off while rows go back in.
		return nil, "resetting in place needs a superuser (session_replication_role)", nil
	case r.version < 140000:
		return nil, "resetting in place needs PostgreSQL 14+ (pg_terminate_backend with timeout)", nil
	}
	var always int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE oid >= 16384 AND tgenabled IN ('A', 'R')`).Scan(&always); err != nil {
		return nil, "", fmt.Errorf("reading the template's triggers: %w", err)
	}
	if always > 0 {
		return nil, "the schema has ENABLE ALWAYS/REPLICA triggers, which would fire during a reset", nil
	}
	type table struct {
		oid        uint32
		name, cols string
		key        []string
		size       int64
	}
	rows, err := conn.Query(ctx, `
		SELECT c.oid, format('%I.%I', n.nspname, c.relname),
		       coalesce((SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum)
		                 FROM pg_attribute a
		                 WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''), ''),
		       coalesce((SELECT array_agg(quote_ident(a.attname) ORDER BY k.ord)
		                 FROM pg_index i CROSS JOIN unnest(i.indkey) WITH ORDINALITY k(attnum, ord)
		                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		                 WHERE i.indrelid = c.oid AND i.indisprimary), '{}'),
		       pg_relation_size(c.oid)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind = 'r' AND c.relpersistence <> 't' AND c.oid >= 16384
		  AND c.oid IS DISTINCT FROM to_regclass('twice.changed') AND c.oid IS DISTINCT FROM to_regclass('twice.ddl')
		  AND c.oid IS DISTINCT FROM to_regclass('twice.history')
		  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%'
		ORDER BY c.oid`)
	if err != nil {
		return nil, "", fmt.Errorf("listing the template's tables: %w", err)
	}
	tables, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (table, error) {
		var t table
		return t, row.Scan(&t.oid, &t.name, &t.cols, &t.key, &t.size)
	})
	if err != nil {
		return nil, "", fmt.Errorf("listing the template's tables: %w", err)
	}
	plan = &resetPlan{byOID: map[uint32]int{}}
	for _, t := range tables {
		// The rows go back as one array literal of the table's row type, in
		// the template's physical row order, each value through its type's
		// text form as COPY does. Whole rows, not one argument per column:
		// functions take at most 100 arguments, tables up to 1600 columns.
		// unnest expands the array once into columns, so no value needs an
		// equality operator and generated columns are simply not selected.
		var n int64
		var values *string
		undo := logsRows && len(t.key) > 0 && t.size >= undoFrom && t.cols != ""
		q := "SELECT count(*), quote_literal(array_agg(ROW(x.*)::" + t.name + ")::text) FROM ONLY " + t.name + " x"
		if undo {
			// The rows stay in the template, where the history's old
			// images come from: no copy of them is kept.
			q = "SELECT count(*), NULL::text FROM ONLY " + t.name
		}
		if err := conn.QueryRow(ctx, q).Scan(&n, &values); err != nil {
			return nil, "", fmt.Errorf("reading the template's rows of %s: %w", t.name, err)
		}
		rt := resetTable{oid: t.oid, name: t.name, rows: n}
		switch {
		case undo:
			rt.undo = history.Table{Name: t.name, Key: t.key}.Undo(t.cols)
		case n == 0:
		case t.cols == "" || values == nil:
			return nil, fmt.Sprintf("table %s has rows but no insertable columns", t.name), nil
		default:
			rt.insert = fmt.Sprintf("INSERT INTO %s (%s) OVERRIDING SYSTEM VALUE SELECT %s FROM unnest(%s::%s[]);\n", t.name, t.cols, t.cols, *values, t.name)
		}
		plan.byOID[t.oid] = len(plan.tables)
		plan.tables = append(plan.tables, rt)
	}
	rows, err = conn.Query(ctx, `SELECT c.oid::bigint, format('%I.%I', n.nspname, c.relname)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind = 'S' AND c.relpersistence <> 't' AND c.oid >= 16384 ORDER BY c.oid`)
	if err != nil {
		return nil, "", fmt.Errorf("listing the template's sequences: %w", err)
	}
	type sequence struct {
		oid  int64
		name string
	}
	seqs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sequence, error) {
		var s sequence
		return s, row.Scan(&s.oid, &s.name)
	})
	if err != nil {
		return nil, "", fmt.Errorf("listing the template's sequences: %w", err)
	}
	// One statement sets back only the sequences that moved: setval
	// writes WAL, and a schema of a few hundred serial columns would pay
	// it for each on every reset. A sequence the template left called
	// moved when its last value differs (NULL once setval(..., false)
	// made it uncalled); one left uncalled is always set back, as
	// pg_sequence_last_value cannot tell its position.
	// The positions go in as three array literals, not a VALUES list:
	// the script is planned on every reset, and a VALUES list of a few
	// hundred rows took longer to plan than to run.
	var oids, lasts, calls []string
	for _, s := range seqs {
		var last int64
		var called bool
		if err := conn.QueryRow(ctx, "SELECT last_value, is_called FROM "+s.name).Scan(&last, &called); err != nil {
			return nil, "", fmt.Errorf("reading sequence %s: %w", s.name, err)
		}
		oids = append(oids, strconv.FormatInt(s.oid, 10))
		lasts = append(lasts, strconv.FormatInt(last, 10))
		calls = append(calls, strconv.FormatBool(called))
	}
	if len(seqs) > 0 {
		plan.setvals = "SELECT count(setval(v.s::regclass, v.last, v.called)) FROM unnest('{" + strings.Join(oids, ",") + "}'::oid[], '{" +
			strings.Join(lasts, ",") + "}'::int8[], '{" + strings.Join(calls, ",") + "}'::bool[]) v(s, last, called)" +
			" WHERE NOT v.called OR pg_sequence_last_value(v.s::regclass) IS DISTINCT FROM v.last;\n"
	}
	return plan, "", nil
}

// writtenSQL lists the tables of plan, by index, whose content may differ
// from the template's: restored[i] is the transaction ID of the reset that
// last wrote table i, 0 when unknown. A table holds exactly what that
// reset wrote when it has the template's number of rows and every one
// still carries that reset's xmin: an insert or an update leaves a row
// version with a later transaction's ID, a delete lowers the count, and a
// TRUNCATE empties it. A table the template leaves empty differs when it
// has any row. Tables with rows whose last reset is unknown are not
// listed (they are reset anyway); "" means none is to be read.
func (p *resetPlan) writtenSQL(restored []uint32) string {
	var parts []string
	for i, t := range p.tables {
		switch {
		case t.rows == 0:
			parts = append(parts, fmt.Sprintf("SELECT %d WHERE EXISTS (SELECT FROM ONLY %s)", i, t.name))
		case restored[i] != 0:
			parts = append(parts, fmt.Sprintf("SELECT %d WHERE (SELECT count(*) <> %d OR coalesce(bool_or(NOT xmin = '%d'::xid), false) FROM ONLY %s)", i, t.rows, restored[i], t.name))
		}
	}
	return strings.Join(parts, "\nUNION ALL ")
}

// script is the SQL that resets the tables listed, in one round trip:
// with triggers and foreign keys off, empty them and reinsert the
// template's rows, set every sequence back, and report the transaction's
// ID. The catalog fingerprint is read after it, as a prepared statement.
func (p *resetPlan) script(tables []int, logged bool) string {
	var b strings.Builder
	b.WriteString("BEGIN;\nSET LOCAL session_replication_role = replica;\nSET LOCAL lock_timeout = '10s';\n")
	for _, i := range tables {
		// A big table's written rows go back first, read from the history
		// the next statements empty.
		b.WriteString(p.tables[i].undo)
	}
	if logged {
		b.WriteString("DELETE FROM twice.changed;\nDELETE FROM twice.history;\n")
	}
	for _, i := range tables {
		if p.tables[i].undo != "" {
			continue
		}
		// DELETE, not TRUNCATE: for a few rows it is ~10x faster (TRUNCATE
		// makes new files for every table and index) and leaves the catalog
		// alone; autovacuum takes the dead rows.
		b.WriteString("DELETE FROM ONLY " + p.tables[i].name + ";\n")
	}
	for _, i := range tables {
		b.WriteString(p.tables[i].insert)
	}
	b.WriteString(p.setvals)
	b.WriteString("SELECT pg_current_xact_id();\nCOMMIT;\n")
	return b.String()
}

// fingerprintSQL digests the user-visible catalog of the current database
// (objects with OIDs from 16384 up, not temporary), leaving out what a reset
// itself changes (relfilenodes, statistics). A database whose fingerprint
// differs from a fresh clone's after a reset had its schema changed and is
// not reused.
const fingerprintSQL = `SELECT string_agg(x, ' ') FROM (
 SELECT 'class:' || count(*) || ':' || coalesce(max(xmin::text::bigint), 0) AS x FROM pg_class WHERE oid >= 16384 AND relpersistence <> 't'
 UNION ALL SELECT 'att:' || count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_attribute WHERE attrelid >= 16384 AND attrelid IN (SELECT oid FROM pg_class WHERE oid >= 16384 AND relpersistence <> 't')
 UNION ALL SELECT 'def:' || count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_attrdef WHERE oid >= 16384
 UNION ALL SELECT 'con:' || count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_constraint WHERE oid >= 16384
 UNION ALL SELECT 'idx:' || count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_index WHERE indexrelid >= 16384
 UNION ALL SELECT 'proc:' || count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_proc WHERE oid >= 16384
 UNION ALL SELECT 'trg:' || count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_trigger WHERE oid >= 16384
 UNION ALL SELECT 'rule:' || count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_rewrite WHERE oid >= 16384
 UNION ALL SELECT 'nsp:' || count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_namespace WHERE oid >= 16384 AND nspname NOT LIKE 'pg\_temp\_%' AND nspname NOT LIKE 'pg\_toast\_temp\_%'
 UNION ALL SELECT 'type:' || count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_type WHERE oid >= 16384 AND typnamespace NOT IN (SELECT oid FROM pg_namespace WHERE nspname LIKE 'pg\_temp\_%' OR nspname LIKE 'pg\_toast\_temp\_%')
 UNION ALL SELECT 'enum:' || count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_enum WHERE true
 UNION ALL SELECT 'seq:' || count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_sequence WHERE seqrelid >= 16384 AND seqrelid IN (SELECT oid FROM pg_class WHERE oid >= 16384 AND relpersistence <> 't')
 UNION ALL SELECT 'pol:' || count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_policy WHERE true
 UNION ALL SELECT 'ext:' || count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_extension WHERE true
 UNION ALL SELECT 'lo:' || count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_largeobject_metadata WHERE true
 UNION ALL SELECT 'dbset:' || count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_db_role_setting WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
 UNION ALL SELECT 'evt:' || count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_event_trigger WHERE true
 UNION ALL SELECT 'desc:' || count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_description WHERE objoid >= 16384
) s`

// othersSQL counts the other sessions in the current database but those
// whose PIDs are in $2, sending each a terminate signal when $1 is true; the backend functions are much cheaper
// than the pg_stat_activity view. pg_terminate_backend's own wait polls in
// 100ms steps, so Drop polls this instead.
const othersSQL = `SELECT count(*) FILTER (WHERE NOT $1 OR pg_terminate_backend(pid))
FROM (SELECT pg_stat_get_backend_pid(s.id) AS pid FROM pg_stat_get_backend_idset() s(id)
      WHERE pg_stat_get_backend_dbid(s.id) = (SELECT oid FROM pg_database WHERE datname = current_database())) b
WHERE pid <> pg_backend_pid() AND pid <> ALL($2::int8[])`

// closeIdle closes the sessions of idle databases so they can be dropped.
func (t *Template) closeIdle(ctx context.Context) {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, d := range idle {
		d.closeAdmin(ctx)
	}
}
