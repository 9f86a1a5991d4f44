// Package history builds the SQL that reads a table's rows back through
// the write history a template's change log keeps (twice.history, see
// freshdb): which rows of the table a database's handlers wrote since it
// was handed out, and what those rows were before, which is the
// template's content for them.
//
// Both the snapshot (which reads only the rows written) and the reset in
// place (which puts back only those) use it, so the two agree on what a
// touched row is. A table qualifies when it has a primary key and no
// table under it: the history keeps each row's images as to_jsonb gives
// them, and the primary key finds the row again.
package history

import (
	"fmt"
	"strings"
)

// Relation is the write history's table. Its columns that this package
// reads: rel (the table's OID), old and new (the row's images, jsonb; a
// TRUNCATE notes each row it removes as a delete) and seq (the order of
// writing).
const Relation = "twice.history"

// Table is a table the history can read back.
type Table struct {
	// Name is the table, quoted and qualified: "public"."orders".
	Name string
	// Key is its primary key's columns, each quoted, in the key's order.
	Key []string
}

// rel is the table's OID as the history's rel column holds it.
func (t Table) rel() string {
	return fmt.Sprintf("'%s'::regclass", strings.ReplaceAll(t.Name, "'", "''"))
}

// images selects, as r, every image the history holds of the table's rows
// (both images of an update), with its seq, side (0 old, 1 new) and was
// (true for an old image: the row was there before that write).
func (t Table) images() string {
	rel := t.rel()
	return "SELECT h.seq, 0 AS side, true AS was, jsonb_populate_record(NULL::" + t.Name + ", h.old) AS r FROM " + Relation +
		" h WHERE h.rel = " + rel + " AND h.old IS NOT NULL" +
		" UNION ALL SELECT h.seq, 1, false, jsonb_populate_record(NULL::" + t.Name + ", h.new) FROM " + Relation +
		" h WHERE h.rel = " + rel + " AND h.new IS NOT NULL"
}

// keyOf is the key's columns of the record expression r, comma separated.
func (t Table) keyOf(r string) string {
	parts := make([]string, len(t.Key))
	for i, k := range t.Key {
		parts[i] = "(" + r + ")." + k
	}
	return strings.Join(parts, ", ")
}

// Written is a query of one row per key the history holds a write of, in
// columns named as the key's: every row the handlers inserted, updated
// (under its old key and its new one) or deleted.
func (t Table) Written() string {
	cols := make([]string, len(t.Key))
	for i, k := range t.Key {
		cols[i] = "(x.r)." + k + " AS " + k
	}
	return "SELECT DISTINCT " + strings.Join(cols, ", ") + " FROM (" + t.images() + ") x"
}

// Current selects the table's rows whose key Written lists, as they are
// now, in the columns of selectList (a select list over the table's
// columns, which may cast them).
func (t Table) Current(selectList string) string {
	return "SELECT " + selectList + " FROM " + t.Name + " WHERE (" + strings.Join(t.Key, ", ") + ") IN (SELECT " +
		strings.Join(t.Key, ", ") + " FROM (" + t.Written() + ") w)"
}

// Before selects, in the columns of selectList, the rows the table held,
// before the first write the history holds, under each key Written
// lists: the template's rows for those keys. A key whose first write
// inserted it had no row, and gives none.
func (t Table) Before(selectList string) string {
	return "SELECT " + selectList + " FROM (SELECT (f.r).* FROM (SELECT DISTINCT ON (" + t.keyOf("k.r") + ") k.was, k.r FROM (" +
		t.images() + ") k ORDER BY " + t.keyOf("k.r") + ", k.seq, k.side) f WHERE f.was) b"
}

// Undo is the statements that put the rows the history names back as
// they were before it, leaving every other row alone: delete every row
// under a key written, then insert the rows Before gives. cols is the
// table's insertable columns (not generated), quoted, comma separated.
// Run it with triggers off (session_replication_role = replica), before
// the history is emptied.
func (t Table) Undo(cols string) string {
	keys := strings.Join(t.Key, ", ")
	return "DELETE FROM ONLY " + t.Name + " WHERE (" + keys + ") IN (SELECT " + keys + " FROM (" + t.Written() + ") w);\n" +
		"INSERT INTO " + t.Name + " (" + cols + ") OVERRIDING SYSTEM VALUE " + t.Before(cols) + ";\n"
}
