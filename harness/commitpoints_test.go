package harness_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// writersSchema writes in the ways a statement's text does not show, or
// shows only through its first word: a plpgsql function, a procedure, a
// DO block, a view whose UPDATE a rule turns into one of its table, a
// trigger that writes a second table.
const writersSchema = `
CREATE TABLE items (id int PRIMARY KEY, note text NOT NULL DEFAULT '');
CREATE TABLE audit (item int PRIMARY KEY);
INSERT INTO items VALUES (1, '');
CREATE FUNCTION add_item(i int) RETURNS int LANGUAGE plpgsql AS $$
BEGIN INSERT INTO items (id) VALUES (i) ON CONFLICT DO NOTHING; RETURN i; END $$;
CREATE FUNCTION item_count() RETURNS int LANGUAGE sql STABLE AS $$ SELECT count(*)::int FROM items $$;
CREATE PROCEDURE add_item_proc(i int) LANGUAGE plpgsql AS $$
BEGIN INSERT INTO items (id) VALUES (i) ON CONFLICT DO NOTHING; END $$;
CREATE VIEW notes AS SELECT id, note FROM items;
CREATE RULE notes_update AS ON UPDATE TO notes DO INSTEAD UPDATE items SET note = NEW.note WHERE id = OLD.id;
CREATE FUNCTION audit_item() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO audit VALUES (NEW.id) ON CONFLICT DO NOTHING; RETURN NEW; END $$;
CREATE TRIGGER audited AFTER INSERT ON items FOR EACH ROW EXECUTE FUNCTION audit_item();
`

// The ambiguous commit strikes every statement that wrote outside a
// transaction, whatever its text says, and no read. Each handler reads
// through a STABLE function, then writes: the one ambiguous-commit
// scenario is at the write, and the server applied it.
func TestAmbiguousCommitWhereTheServerWrote(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write string
		args  []any
		table string // where the write lands
		row   string // the row it writes, as text
	}{
		{"select of a writing function", "SELECT add_item($1)", []any{2}, "items", "(2,)"},
		{"select of a writing function, simple protocol", "SELECT add_item(2)", nil, "items", "(2,)"},
		{"call", "CALL add_item_proc($1)", []any{2}, "items", "(2,)"},
		{"do", "DO $$ BEGIN INSERT INTO items (id) VALUES (2) ON CONFLICT DO NOTHING; END $$", nil, "items", "(2,)"},
		{"update through a view with a rule", "UPDATE notes SET note = $1 WHERE id = 1", []any{"done"}, "items", "(1,done)"},
		{"write done by a trigger on an insert", "INSERT INTO items (id) VALUES ($1) ON CONFLICT DO NOTHING", []any{2}, "audit", "(2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := harness.Job{Name: "writer", Handler: func(ctx context.Context, d *harness.Delivery) error {
				var n int
				if err := d.DB.QueryRow(ctx, `SELECT item_count()`).Scan(&n); err != nil {
					return err
				}
				_, err := d.DB.Exec(ctx, tc.write, tc.args...)
				return err
			}}
			res, err := harness.Run(t.Context(), job, harness.Config{
				Setup:  []harness.Setup{harness.SQL(writersSchema)},
				Faults: []faults.Fault{faults.AmbiguousCommits()},
			})
			require.NoError(t, err)
			t.Cleanup(func() { res.DropDatabases(context.Background()) })

			assert.Equal(t, []faults.Step{{SQL: "SELECT item_count()"}, {SQL: tc.write, CommitPoint: true, Autocommit: true}}, res.Steps,
				"the read is no commit point, the write is")
			require.Len(t, res.Scenarios, 1)
			sc := res.Scenarios[0]
			assert.Equal(t, "j1a1w1!ambiguous:2 > +30s j1a2w2", sc.Schedule.String())
			assert.Equal(t, &result.StepTaken{Step: faults.Step{SQL: tc.write, CommitPoint: true, Autocommit: true}, Fate: result.ReplyLost}, sc.Deliveries[0].Faulted())
			assert.NotEmpty(t, sc.Deliveries[0].Err, "the handler saw its connection drop")
			assert.Equal(t, result.Idempotent, sc.Verdict, "every write here is idempotent: %+v", sc.StateDiff)
			var found bool
			for _, tbl := range res.Reference.Tables {
				if tbl.Name == tc.table {
					for _, r := range tbl.Rows {
						found = found || rowText(r) == tc.row
					}
				}
			}
			assert.True(t, found, "the reference holds %s in %s", tc.row, tc.table)
		})
	}
}

// rowText prints a snapshot row as PostgreSQL prints a record.
func rowText(r []any) string {
	parts := make([]string, len(r))
	for i, v := range r {
		parts[i] = fmt.Sprint(v)
	}
	return "(" + strings.Join(parts, ",") + ")"
}

// A job that only reads through a STABLE function has no commit point:
// no ambiguous commit can strike it, so a check of that fault alone is
// an error rather than a pass.
func TestNoAmbiguousCommitOnARead(t *testing.T) {
	job := harness.Job{Name: "reader", Handler: func(ctx context.Context, d *harness.Delivery) error {
		var n int
		return d.DB.QueryRow(ctx, `SELECT item_count()`).Scan(&n)
	}}
	_, err := harness.Run(t.Context(), job, harness.Config{
		Setup:  []harness.Setup{harness.SQL(writersSchema)},
		Faults: []faults.Fault{faults.AmbiguousCommits()},
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `job "reader": Config.Faults gave no scenario for its clean run of 1 steps`)
}
