package assert

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Querier runs a query. *pgx.Conn, *pgxpool.Pool and pgx.Tx satisfy it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ReservedSchema is the schema the harness keeps its own tables in;
// TakeSnapshot leaves it out.
const ReservedSchema = "twice"

// Snapshot is the content of every user table of one database.
//
// Values are plain Go data that encoding/json can write: nil (NULL),
// int64 (smallint, integer, bigint), float64 (real, double precision;
// NaN and ±Infinity as the strings "NaN", "Infinity", "-Infinity"),
// bool, string (numeric, text, enums, uuid, interval and every other type,
// in PostgreSQL's text form), time.Time (timestamptz in UTC; timestamp and
// date as UTC wall clock; ±infinity as the strings "infinity",
// "-infinity"), []byte (bytea), and decoded JSON (json, jsonb, arrays and
// composite types: map[string]any, []any, json.Number, string, bool, nil;
// integer array elements become int64, float elements float64, numeric
// elements string).
type Snapshot struct {
	Tables []Table // sorted by Name
	// Sequences are where the database's sequences stood, sorted by
	// name. They are not state and never compared; they explain a value
	// that differs because an attempt burnt sequence values (SequenceGap).
	Sequences []Sequence `json:",omitempty"`
}

// Table is one table's columns and rows. Rows are in a canonical order
// (column by column), each holding one value per column.
type Table struct {
	// Name is the table name, qualified by its schema outside public:
	// "orders", "billing.invoices".
	Name    string
	Columns []Column
	Rows    [][]any
	// Written is set when the table was read in part, through the
	// database's write history: Rows are then only the rows the run
	// wrote. See Written and Snapshotter.PartialFrom.
	Written *Written `json:",omitempty"`
}

// Column describes one column of a Table.
type Column struct {
	Name string
	Type string // as PostgreSQL's format_type spells it: "bigint", "numeric(10,2)", "text[]"
	// Sequence is set when the column's values are drawn from a sequence:
	// serial, identity, or a default calling nextval.
	Sequence bool
	// References is the "table.column" a foreign key on this column points
	// at, if any. A column in a composite foreign key references the
	// matching column of the target. When a column has several foreign
	// keys, one pointing at a sequence-drawn column wins.
	References string
}

// table returns the named table, or nil. Hand-built snapshots need not
// be sorted, so it scans.
func (s *Snapshot) table(name string) *Table {
	if s == nil {
		return nil
	}
	return find(s.Tables, func(t Table) bool { return t.Name == name })
}

// find is the first of xs that ok holds for, or nil.
func find[T any](xs []T, ok func(T) bool) *T {
	if i := slices.IndexFunc(xs, ok); i >= 0 {
		return &xs[i]
	}
	return nil
}

// decodeKind says how a column is fetched and turned into a snapshot value.
type decodeKind int

const (
	kindText decodeKind = iota
	kindInt
	kindFloat
	kindBool
	kindTimestamptz
	kindTimestamp
	kindDate
	kindBytea
	kindJSON  // json and jsonb
	kindJSONB // arrays and composites, through to_jsonb
	kindKeep  // array elements left as decoded JSON
)

// Type OIDs from pg_type.dat.
const (
	oidBool        = 16
	oidBytea       = 17
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidJSON        = 114
	oidFloat4      = 700
	oidFloat8      = 701
	oidNumeric     = 1700
	oidDate        = 1082
	oidTimestamp   = 1114
	oidTimestamptz = 1184
	oidJSONB       = 3802
)

type columnPlan struct {
	kind decodeKind
	elem decodeKind // for arrays: how JSON numbers of the elements read
}

func planFor(baseOID uint32, typtype, category string, elemOID uint32) columnPlan {
	if category == "A" {
		return columnPlan{kind: kindJSONB, elem: elemKind(elemOID)}
	}
	if typtype == "c" {
		return columnPlan{kind: kindJSONB, elem: kindKeep}
	}
	switch baseOID {
	case oidInt2, oidInt4, oidInt8:
		return columnPlan{kind: kindInt}
	case oidFloat4, oidFloat8:
		return columnPlan{kind: kindFloat}
	case oidBool:
		return columnPlan{kind: kindBool}
	case oidTimestamptz:
		return columnPlan{kind: kindTimestamptz}
	case oidTimestamp:
		return columnPlan{kind: kindTimestamp}
	case oidDate:
		return columnPlan{kind: kindDate}
	case oidBytea:
		return columnPlan{kind: kindBytea}
	case oidJSON, oidJSONB:
		return columnPlan{kind: kindJSON}
	}
	return columnPlan{kind: kindText}
}

func elemKind(oid uint32) decodeKind {
	switch oid {
	case oidInt2, oidInt4, oidInt8:
		return kindInt
	case oidFloat4, oidFloat8:
		return kindFloat
	case oidNumeric:
		return kindText
	}
	return kindKeep
}

// catalogColumnsSQL lists the columns of every snapshotted table: ordinary
// and partitioned tables (not partitions, whose rows their parent shows),
// outside system schemas, the reserved schema and extensions.
const catalogColumnsSQL = `
WITH RECURSIVE dom(oid, base) AS (
	SELECT oid, typbasetype FROM pg_type WHERE typtype = 'd'
	UNION ALL
	SELECT dom.oid, t.typbasetype FROM dom JOIN pg_type t ON t.oid = dom.base AND t.typtype = 'd'
), base AS (
	SELECT dom.oid, dom.base FROM dom JOIN pg_type t ON t.oid = dom.base AND t.typtype <> 'd'
)
SELECT n.nspname, c.relname, a.attname,
	format_type(a.atttypid, a.atttypmod),
	a.attidentity <> '' OR coalesce(pg_get_expr(d.adbin, d.adrelid) LIKE '%nextval(%', false),
	bt.oid::int8, bt.typtype::text, bt.typcategory::text,
	coalesce((SELECT base FROM base WHERE base.oid = bt.typelem), bt.typelem)::int8
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
LEFT JOIN pg_type bt ON bt.oid = coalesce((SELECT base FROM base WHERE base.oid = a.atttypid), a.atttypid)
WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
	AND n.nspname NOT LIKE 'pg\_%' AND n.nspname NOT IN ('information_schema', '` + ReservedSchema + `')
	AND NOT EXISTS (
		SELECT 1 FROM pg_depend e
		WHERE e.classid = 'pg_class'::regclass AND e.objid = c.oid AND e.deptype = 'e')
ORDER BY n.nspname, c.relname, a.attnum`

// catalogForeignKeysSQL lists each column of each foreign key with the
// column it references; constraints cloned onto partitions are left out.
const catalogForeignKeysSQL = `
SELECT sn.nspname, sc.relname, sa.attname, tn.nspname, tc.relname, ta.attname
FROM pg_constraint con
JOIN pg_class sc ON sc.oid = con.conrelid
JOIN pg_namespace sn ON sn.oid = sc.relnamespace
JOIN pg_class tc ON tc.oid = con.confrelid
JOIN pg_namespace tn ON tn.oid = tc.relnamespace
CROSS JOIN LATERAL unnest(con.conkey, con.confkey) AS k(src, tgt)
JOIN pg_attribute sa ON sa.attrelid = con.conrelid AND sa.attnum = k.src
JOIN pg_attribute ta ON ta.attrelid = con.confrelid AND ta.attnum = k.tgt
WHERE con.contype = 'f' AND con.conparentid = 0
ORDER BY con.conname, sn.nspname, sc.relname, k.src`

func tableName(schema, rel string) string {
	if schema == "public" {
		return rel
	}
	return schema + "." + rel
}

// tableSource is what a snapshot needs to read one table.
type tableSource struct {
	schema, rel string
	plans       []columnPlan
	sql         string         // the query reading its rows
	partial     *partialSource // how TakeChanged reads it in part; nil: whole
}

// TakeSnapshot reads every user table of the database q is connected to:
// all ordinary and partitioned tables outside pg_catalog,
// information_schema, pg_toast (and the other pg_* schemas), the reserved
// schema "twice" and tables owned by extensions. Sequences, views and
// materialized views are not state and are left out; the sequences'
// positions are noted in Snapshot.Sequences, to explain differences.
//
// With a pool, each table may be read on a different connection; pass a
// pgx.Tx opened REPEATABLE READ when writers may still be running and the
// snapshot must be consistent.
//
// TakeSnapshot reads the catalog every time; a Snapshotter reads it once
// for many databases of one schema.
func TakeSnapshot(ctx context.Context, q Querier) (*Snapshot, error) {
	var s Snapshotter
	return s.Take(ctx, q)
}

// Snapshotter takes snapshots, as TakeSnapshot does, of databases that
// share one schema, such as the fresh copies of one template database. It
// reads the catalog (tables, columns, types, foreign keys, sequences) once
// and keeps what it learnt as a plan; each later snapshot (but
// TakeChanged's, whose caller vouches for the catalog) checks a
// fingerprint of the catalog (the number of rows and the newest
// transaction ID of pg_class, pg_attribute, pg_attrdef, pg_type,
// pg_namespace, pg_constraint, pg_sequence and extension memberships),
// which any DDL changes, and reads the catalog again only when it
// differs. A snapshot costs one round trip when q can send a pgx.Batch
// (*pgx.Conn, *pgxpool.Pool and pgx.Tx can).
//
// The zero value is ready to use. A Snapshotter is safe for concurrent
// use.
type Snapshotter struct {
	// PartialFrom, when positive, makes TakeChanged read in part every
	// table of at least that many bytes (its main fork) that has a primary
	// key, when the database keeps twice's write history (twice.history,
	// which a template the harness prepared as a superuser has): only the
	// rows under a key the history holds a write of, and the template's
	// rows under those keys (Table.Written). Set it before the first
	// snapshot.
	PartialFrom int64

	mu    sync.Mutex
	last  *snapshotPlan            // the plan the last snapshot used
	plans map[string]*snapshotPlan // by fingerprint; at most maxPlans
	// template is the plan of the template's catalog, which the first
	// TakeChanged read; the later ones use it unchecked.
	template *snapshotPlan
}

// maxPlans bounds the plans a Snapshotter keeps: the template's, and a
// few of handlers that ran DDL, each of which has a fingerprint of its own.
const maxPlans = 4

// snapshotPlan is what the catalog says about how to read a database.
type snapshotPlan struct {
	fingerprint string
	tables      []Table // columns and references, no rows; sorted by Name
	sources     []tableSource
	sequences   []sequenceSource

	// pristine holds, per table of tables, the rows a database read by
	// TakeChanged had when it had not changed that table: the template's,
	// read once and shared by every later snapshot (nil until read).
	pristineMu sync.Mutex
	pristine   [][][]any
}

// batcher is the part of *pgx.Conn, *pgxpool.Pool and pgx.Tx that sends
// many queries in one round trip.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Take reads every user table of the database q is connected to; see
// TakeSnapshot for which tables, and Snapshotter for how.
func (s *Snapshotter) Take(ctx context.Context, q Querier) (*Snapshot, error) {
	return s.take(ctx, q, nil)
}

// TakeChanged is Take for a database that is a copy of one template
// database, made with CREATE DATABASE ... TEMPLATE or reset in place to
// its content, and of which the server told which tables were written
// since: changed reports them, by schema and table name. Every other
// table must hold exactly the template's rows. TakeChanged reads those
// once, from the first database that had not changed them, and shares
// them with every later snapshot, whose own rows it reads only for the
// tables changed; DiffState does not compare a table whose rows two
// snapshots share. A table is changed when a row of it, or (for a
// partitioned or inheritance parent) of a table under it, was written.
//
// A changed func also says that the database's catalog is the template's,
// unchanged by DDL: a server's change log can tell only then (the
// harness's is Known only then). The first TakeChanged plans, and checks
// the catalog's fingerprint, as Take does; every later one reads with that
// plan and no fingerprint, whose cost grows with the tables of the schema.
// After DDL, call Take (changed nil): it checks the fingerprint.
//
// Use one Snapshotter per template database for TakeChanged; changed
// nil is Take.
func (s *Snapshotter) TakeChanged(ctx context.Context, q Querier, changed func(schema, table string) bool) (*Snapshot, error) {
	return s.take(ctx, q, changed)
}

func (s *Snapshotter) take(ctx context.Context, q Querier, changed func(schema, table string) bool) (*Snapshot, error) {
	if q == nil {
		return nil, fmt.Errorf("TakeSnapshot: nil Querier")
	}
	if changed != nil {
		s.mu.Lock()
		tpl := s.template
		s.mu.Unlock()
		if tpl != nil {
			snap, _, err := readWithPlan(ctx, q, tpl, changed, false)
			return snap, err
		}
	}
	snap, plan, err := s.takeChecked(ctx, q, changed)
	if err == nil && changed != nil {
		s.mu.Lock()
		if s.template == nil {
			s.template = plan
		}
		s.mu.Unlock()
	}
	return snap, err
}

// takeChecked is take with the catalog's fingerprint checked; it returns
// the plan it read with.
func (s *Snapshotter) takeChecked(ctx context.Context, q Querier, changed func(schema, table string) bool) (*Snapshot, *snapshotPlan, error) {
	s.mu.Lock()
	plan := s.last
	s.mu.Unlock()
	if plan != nil {
		snap, fp, err := readWithPlan(ctx, q, plan, changed, true)
		if err != nil || snap != nil {
			return snap, plan, err
		}
		// Another schema than last time's: one planned before?
		s.mu.Lock()
		known := s.plans[fp]
		s.mu.Unlock()
		if known != nil {
			snap, _, err := readWithPlan(ctx, q, known, changed, true)
			if err != nil || snap != nil {
				s.use(known)
				return snap, known, err
			}
		}
	}
	// No plan for this catalog: the first snapshot, or a handler ran DDL.
	plan, err := readCatalog(ctx, q)
	if err == nil && s.PartialFrom > 0 && changed != nil {
		err = readPartial(ctx, q, plan, s.PartialFrom)
	}
	if err != nil {
		return nil, nil, err
	}
	s.use(plan)
	snap, _, err := readWithPlan(ctx, q, plan, changed, true)
	if err == nil && snap == nil {
		return nil, nil, fmt.Errorf("snapshot: the catalog changed while it was read; is DDL still running?")
	}
	return snap, plan, err
}

// use makes plan the one to try first, and keeps it.
func (s *Snapshotter) use(plan *snapshotPlan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = plan
	if s.plans[plan.fingerprint] == plan {
		return
	}
	if s.plans == nil || len(s.plans) >= maxPlans {
		s.plans = map[string]*snapshotPlan{}
	}
	s.plans[plan.fingerprint] = plan
}

// catalogFingerprintSQL changes whenever DDL changes what a snapshot plan
// holds: every insert or update of a catalog row writes the row with its
// transaction's ID, which is newer than any there before, and a delete
// changes the count. Objects below FirstNormalObjectId (16384) are the
// system's own, except schemas, which are all counted (public is one).
const catalogFingerprintSQL = `
SELECT concat_ws(' ',
	(SELECT count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_class WHERE oid >= 16384),
	(SELECT count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_attribute WHERE attrelid >= 16384),
	(SELECT count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_attrdef WHERE oid >= 16384),
	(SELECT count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_type WHERE oid >= 16384),
	(SELECT count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_namespace),
	(SELECT count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_constraint WHERE oid >= 16384),
	(SELECT count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_sequence WHERE seqrelid >= 16384),
	(SELECT count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM pg_depend WHERE refclassid = 'pg_extension'::regclass))`

// readWithPlan reads the rows and sequence positions plan says to read.
// With check, when the catalog no longer matches plan it returns a nil
// snapshot and the catalog's fingerprint; without, the caller knows it
// matches, and the fingerprint is not read. With changed set, the tables
// it does not report take plan's pristine rows, once they are known.
func readWithPlan(ctx context.Context, q Querier, plan *snapshotPlan, changed func(schema, table string) bool, check bool) (*Snapshot, string, error) {
	snap := &Snapshot{Tables: make([]Table, len(plan.tables))}
	for i, t := range plan.tables {
		snap.Tables[i] = Table{Name: t.Name, Columns: slices.Clone(t.Columns)}
	}
	// read[i]: table i is read from the database; fill[i]: and its rows
	// are the template's, to keep; part[i]: it is read in part.
	read := make([]bool, len(plan.tables))
	fill := make([]bool, len(plan.tables))
	part := make([]bool, len(plan.tables))
	plan.pristineMu.Lock()
	if changed != nil && plan.pristine == nil {
		plan.pristine = make([][][]any, len(plan.tables))
	}
	for i, src := range plan.sources {
		switch {
		case changed != nil && src.partial != nil:
			snap.Tables[i].Rows = [][]any{}
			snap.Tables[i].Written = &Written{Key: src.partial.key}
			read[i] = changed(src.schema, src.rel)
			part[i] = read[i]
		case changed == nil || changed(src.schema, src.rel):
			read[i] = true
		case plan.pristine[i] == nil:
			read[i], fill[i] = true, true
		default:
			snap.Tables[i].Rows = plan.pristine[i]
		}
	}
	plan.pristineMu.Unlock()
	keep := func() {
		if changed == nil {
			return
		}
		plan.pristineMu.Lock()
		defer plan.pristineMu.Unlock()
		for i := range fill {
			if fill[i] && plan.pristine[i] == nil {
				plan.pristine[i] = snap.Tables[i].Rows
			}
		}
	}
	if b, isBatcher := q.(batcher); isBatcher {
		fp, err := readBatch(ctx, b, plan, snap, read, part, check)
		if err != nil && check && ctx.Err() == nil {
			// A batch is prepared as a whole, so a query the changed
			// catalog no longer fits fails it before the fingerprint is
			// read.
			if fp, ferr := readFingerprint(ctx, q); ferr == nil && fp != plan.fingerprint {
				return nil, fp, nil
			}
		}
		if err != nil || fp != plan.fingerprint {
			return nil, fp, err
		}
		keep()
		return snap, fp, nil
	}
	fp := plan.fingerprint
	if check {
		var err error
		fp, err = readFingerprint(ctx, q)
		if err != nil || fp != plan.fingerprint {
			return nil, fp, err
		}
	}
	if err := readSequenceValues(ctx, q, plan.sequences, snap); err != nil {
		return nil, fp, err
	}
	for i := range snap.Tables {
		switch {
		case !read[i]:
		case part[i]:
			src := plan.sources[i]
			rows, err := q.Query(ctx, src.partial.current, pgx.QueryExecModeDescribeExec)
			if err := readRows(rows, err, &snap.Tables[i], src); err != nil {
				return nil, fp, err
			}
			rows, err = q.Query(ctx, src.partial.before, pgx.QueryExecModeDescribeExec)
			if err := readBefore(rows, err, &snap.Tables[i], src); err != nil {
				return nil, fp, err
			}
		default:
			rows, err := q.Query(ctx, plan.sources[i].sql, pgx.QueryExecModeDescribeExec)
			if err := readRows(rows, err, &snap.Tables[i], plan.sources[i]); err != nil {
				return nil, fp, err
			}
		}
	}
	keep()
	return snap, fp, nil
}

// readBatch reads into snap, in one round trip, the fingerprint (with
// check; without, it is taken to be plan's), then, when it is plan's, the
// sequence positions and the rows of the tables read marks, in part
// where part marks them.
func readBatch(ctx context.Context, q batcher, plan *snapshotPlan, snap *Snapshot, read, part []bool, check bool) (fp string, err error) {
	b := &pgx.Batch{}
	if check {
		b.Queue(catalogFingerprintSQL)
	}
	if len(plan.sequences) > 0 {
		b.Queue(sequenceValuesSQL, sequenceOIDs(plan.sequences))
	}
	for i, src := range plan.sources {
		switch {
		case part[i]:
			b.Queue(src.partial.current)
			b.Queue(src.partial.before)
		case read[i]:
			b.Queue(src.sql)
		}
	}
	br := q.SendBatch(ctx, b)
	defer func() {
		// What the batch holds past a changed fingerprint was read for
		// another catalog and may have failed; it does not count.
		if cerr := br.Close(); cerr != nil && err == nil && fp == plan.fingerprint {
			err = fmt.Errorf("snapshot: %w", cerr)
		}
	}()
	fp = plan.fingerprint
	if check {
		fp, err = scanFingerprint(br.Query())
		if err != nil || fp != plan.fingerprint {
			return fp, err
		}
	}
	if len(plan.sequences) > 0 {
		rows, err := br.Query()
		if err := scanSequenceValues(rows, err, plan.sequences, snap); err != nil {
			return fp, err
		}
	}
	for i := range snap.Tables {
		if !read[i] {
			continue
		}
		rows, err := br.Query()
		if err := readRows(rows, err, &snap.Tables[i], plan.sources[i]); err != nil {
			return fp, err
		}
		if part[i] {
			rows, err := br.Query()
			if err := readBefore(rows, err, &snap.Tables[i], plan.sources[i]); err != nil {
				return fp, err
			}
		}
	}
	return fp, nil
}

// readBefore reads the template's rows under the keys written into
// t.Written.Before.
func readBefore(rows pgx.Rows, err error, t *Table, src tableSource) error {
	before := Table{Name: t.Name, Columns: t.Columns}
	if err := readRows(rows, err, &before, src); err != nil {
		return err
	}
	t.Written.Before = before.Rows
	return nil
}

func readFingerprint(ctx context.Context, q Querier) (string, error) {
	rows, err := q.Query(ctx, catalogFingerprintSQL)
	if err != nil {
		return "", fmt.Errorf("snapshot: reading the catalog's fingerprint: %w", err)
	}
	return scanFingerprint(rows, nil)
}

func scanFingerprint(rows pgx.Rows, err error) (string, error) {
	if err == nil {
		var fp string
		fp, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[string])
		if err == nil {
			return fp, nil
		}
	}
	return "", fmt.Errorf("snapshot: reading the catalog's fingerprint: %w", err)
}

// readCatalog plans snapshots of the database q is connected to.
func readCatalog(ctx context.Context, q Querier) (*snapshotPlan, error) {
	// The fingerprint first: DDL that lands while the catalog is read
	// changes the next fingerprint, so the plan is made again then.
	fp, err := readFingerprint(ctx, q)
	if err != nil {
		return nil, err
	}
	// The catalog queries take no parameters, so a connection that caches
	// prepared statements parses them once; pgx's default mode does.
	rows, err := q.Query(ctx, catalogColumnsSQL)
	if err != nil {
		return nil, fmt.Errorf("snapshot: listing tables: %w", err)
	}
	snap := &Snapshot{}
	var sources []tableSource
	for rows.Next() {
		var (
			schema, rel                 string
			col, typ, typtype, category pgtype.Text
			seq                         pgtype.Bool
			baseOID, elemOID            pgtype.Int8
		)
		if err := rows.Scan(&schema, &rel, &col, &typ, &seq, &baseOID, &typtype, &category, &elemOID); err != nil {
			rows.Close()
			return nil, fmt.Errorf("snapshot: listing tables: %w", err)
		}
		name := tableName(schema, rel)
		if n := len(snap.Tables); n == 0 || snap.Tables[n-1].Name != name {
			snap.Tables = append(snap.Tables, Table{Name: name})
			sources = append(sources, tableSource{schema: schema, rel: rel})
		}
		if !col.Valid { // a table without columns
			continue
		}
		t, src := &snap.Tables[len(snap.Tables)-1], &sources[len(sources)-1]
		t.Columns = append(t.Columns, Column{Name: col.String, Type: typ.String, Sequence: seq.Bool})
		src.plans = append(src.plans, planFor(uint32(baseOID.Int64), typtype.String, category.String, uint32(elemOID.Int64)))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("snapshot: listing tables: %w", err)
	}
	// Sorted by qualified name, which the catalog's (schema, table) order
	// is not: "public.b" shows as "b".
	idx := make([]int, len(snap.Tables))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return strings.Compare(snap.Tables[a].Name, snap.Tables[b].Name) })
	tables := make([]Table, len(idx))
	srcs := make([]tableSource, len(idx))
	for i, j := range idx {
		tables[i], srcs[i] = snap.Tables[j], sources[j]
		srcs[i].sql = rowsSQL(tables[i], srcs[i])
	}
	snap.Tables = tables
	if err := readForeignKeys(ctx, q, snap); err != nil {
		return nil, err
	}
	seqs, err := readSequenceCatalog(ctx, q)
	if err != nil {
		return nil, err
	}
	return &snapshotPlan{fingerprint: fp, tables: snap.Tables, sources: srcs, sequences: seqs}, nil
}

func readForeignKeys(ctx context.Context, q Querier, snap *Snapshot) error {
	rows, err := q.Query(ctx, catalogForeignKeysSQL)
	if err != nil {
		return fmt.Errorf("snapshot: listing foreign keys: %w", err)
	}
	type ref struct{ table, column, target string }
	var refs []ref
	for rows.Next() {
		var sn, sr, sa, tn, tr, ta string
		if err := rows.Scan(&sn, &sr, &sa, &tn, &tr, &ta); err != nil {
			rows.Close()
			return fmt.Errorf("snapshot: listing foreign keys: %w", err)
		}
		refs = append(refs, ref{tableName(sn, sr), sa, tableName(tn, tr) + "." + ta})
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("snapshot: listing foreign keys: %w", err)
	}
	for _, r := range refs {
		c := snap.column(r.table, r.column)
		if c == nil {
			continue
		}
		if c.References == "" || (!snap.drawnFromSequence(c.References) && snap.drawnFromSequence(r.target)) {
			c.References = r.target
		}
	}
	return nil
}

// column returns the named column of the named table, or nil.
func (s *Snapshot) column(table, column string) *Column {
	t := s.table(table)
	if t == nil {
		return nil
	}
	return find(t.Columns, func(c Column) bool { return c.Name == column })
}

// drawnFromSequence reports whether "table.column" is a Sequence column.
func (s *Snapshot) drawnFromSequence(ref string) bool {
	t, c, ok := splitColumnRef(ref)
	if !ok {
		return false
	}
	col := s.column(t, c)
	return col != nil && col.Sequence
}

// splitColumnRef splits "table.column" (or "schema.table.column") at its
// last dot.
func splitColumnRef(ref string) (table, column string, ok bool) {
	i := strings.LastIndexByte(ref, '.')
	if i < 0 {
		return "", ref, false
	}
	return ref[:i], ref[i+1:], true
}

// rowsSQL is the query that reads t's rows, each column cast to what
// newDest scans.
func rowsSQL(t Table, src tableSource) string {
	from := " FROM " + pgx.Identifier{src.schema, src.rel}.Sanitize()
	if len(t.Columns) == 0 {
		return "SELECT" + from
	}
	exprs := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		exprs[i] = selectExpr(pgx.Identifier{c.Name}.Sanitize(), src.plans[i].kind)
	}
	return "SELECT " + strings.Join(exprs, ", ") + from
}

// readRows reads the result of src.sql, or the error of sending it, into
// t.Rows, in canonical order.
func readRows(rows pgx.Rows, err error, t *Table, src tableSource) error {
	if err != nil {
		return fmt.Errorf("snapshot: reading table %q: %w", t.Name, err)
	}
	defer rows.Close()
	dests := make([]any, len(t.Columns))
	for i, p := range src.plans {
		dests[i] = newDest(p.kind)
	}
	t.Rows = [][]any{}
	for rows.Next() {
		if err := rows.Scan(dests...); err != nil {
			return fmt.Errorf("snapshot: reading table %q: %w", t.Name, err)
		}
		row := make([]any, len(dests))
		for i, d := range dests {
			v, err := snapshotValue(d, src.plans[i])
			if err != nil {
				return fmt.Errorf("snapshot: reading %s.%s: %w", t.Name, t.Columns[i].Name, err)
			}
			row[i] = v
		}
		t.Rows = append(t.Rows, row)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("snapshot: reading table %q: %w", t.Name, err)
	}
	slices.SortStableFunc(t.Rows, compareRows)
	return nil
}

// selectExpr casts a column to what newDest scans, so domains and every
// type without a Go decoder arrive in a known form.
func selectExpr(col string, kind decodeKind) string {
	switch kind {
	case kindInt:
		return col + "::int8"
	case kindBool:
		return col + "::bool"
	case kindTimestamptz:
		return col + "::timestamptz"
	case kindTimestamp:
		return col + "::timestamp"
	case kindDate:
		return col + "::date"
	case kindBytea:
		return col + "::bytea"
	case kindJSONB:
		return "to_jsonb(" + col + ")::text"
	}
	return col + "::text"
}

func newDest(kind decodeKind) any {
	switch kind {
	case kindInt:
		return new(pgtype.Int8)
	case kindBool:
		return new(pgtype.Bool)
	case kindTimestamptz:
		return new(pgtype.Timestamptz)
	case kindTimestamp:
		return new(pgtype.Timestamp)
	case kindDate:
		return new(pgtype.Date)
	case kindBytea:
		return new([]byte)
	}
	return new(pgtype.Text)
}

func snapshotValue(dest any, p columnPlan) (any, error) {
	switch d := dest.(type) {
	case *pgtype.Int8:
		if !d.Valid {
			return nil, nil
		}
		return d.Int64, nil
	case *pgtype.Bool:
		if !d.Valid {
			return nil, nil
		}
		return d.Bool, nil
	case *pgtype.Timestamptz:
		if !d.Valid {
			return nil, nil
		}
		return timeValue(d.Time.UTC(), d.InfinityModifier), nil
	case *pgtype.Timestamp:
		if !d.Valid {
			return nil, nil
		}
		return timeValue(d.Time, d.InfinityModifier), nil
	case *pgtype.Date:
		if !d.Valid {
			return nil, nil
		}
		return timeValue(d.Time, d.InfinityModifier), nil
	case *[]byte:
		if *d == nil {
			return nil, nil
		}
		return slices.Clone(*d), nil
	case *pgtype.Text:
		if !d.Valid {
			return nil, nil
		}
		return textValue(d.String, p)
	}
	return nil, fmt.Errorf("unexpected destination %T", dest)
}

func timeValue(t any, inf pgtype.InfinityModifier) any {
	switch inf {
	case pgtype.Infinity:
		return "infinity"
	case pgtype.NegativeInfinity:
		return "-infinity"
	}
	return t
}

func textValue(s string, p columnPlan) (any, error) {
	switch p.kind {
	case kindFloat:
		return floatValue(s)
	case kindJSON, kindJSONB:
		dec := json.NewDecoder(strings.NewReader(s))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if p.kind == kindJSONB {
			return jsonElems(v, p.elem), nil
		}
		return v, nil
	}
	return s, nil
}

// floatValue keeps NaN and infinities as strings, which JSON can carry
// and go-cmp compares as equal.
func floatValue(s string) (any, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, err
	}
	switch {
	case math.IsNaN(f):
		return "NaN", nil
	case math.IsInf(f, 1):
		return "Infinity", nil
	case math.IsInf(f, -1):
		return "-Infinity", nil
	}
	return f, nil
}

// jsonElems gives array elements the Go types their scalar columns get.
func jsonElems(v any, elem decodeKind) any {
	switch v := v.(type) {
	case []any:
		for i := range v {
			v[i] = jsonElems(v[i], elem)
		}
		return v
	case json.Number:
		switch elem {
		case kindInt:
			if n, err := v.Int64(); err == nil {
				return n
			}
		case kindFloat:
			if f, err := v.Float64(); err == nil {
				return f
			}
		case kindText:
			return string(v)
		}
	}
	return v
}
