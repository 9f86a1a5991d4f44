package harness_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// fixtureSchema has a table the clean run never writes: a snapshot takes
// its rows from the template, read once, and reads it only where the
// change log says a scenario wrote it.
const fixtureSchema = `
CREATE TABLE items (id bigint PRIMARY KEY);
CREATE TABLE rates (id int PRIMARY KEY, v int NOT NULL);
INSERT INTO rates SELECT g, g * 10 FROM generate_series(1, 50) g;
`

// redeliveryWrites is a job that inserts its item and, only when the
// item is there already (a second delivery), runs update on the fixture.
func redeliveryWrites(update string) harness.Job {
	return harness.Job{Name: "fixture", Handler: func(ctx context.Context, d *harness.Delivery) error {
		tag, err := d.DB.Exec(ctx, `INSERT INTO items VALUES (1) ON CONFLICT DO NOTHING`)
		if err != nil || tag.RowsAffected() == 1 {
			return err
		}
		_, err = d.DB.Exec(ctx, update)
		return err
	}}
}

// A table only a second delivery writes is compared, though the clean
// run left it as the template had it.
func TestFindsWriteToTableTheCleanRunLeftAlone(t *testing.T) {
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(fixtureSchema)}, Faults: []faults.Fault{faults.RunTwice()}}
	res, err := harness.Run(t.Context(), redeliveryWrites(`UPDATE rates SET v = v + 1 WHERE id = 7`), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	require.Len(t, res.Scenarios, 1)
	s := res.Scenarios[0]
	assert.Equal(t, result.NotIdempotent, s.Verdict)
	require.Len(t, s.StateDiff, 1)
	assert.Equal(t, "rates", s.StateDiff[0].Table)
	assert.Contains(t, s.StateDiff[0].Diff, "71")
}

// A write that leaves a table as it was changes nothing: the table is
// read and compared, not taken as different for being written.
func TestWriteThatChangesNothingIsIdempotent(t *testing.T) {
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(fixtureSchema + "-- same value")}, Faults: []faults.Fault{faults.RunTwice()}}
	res, err := harness.Run(t.Context(), redeliveryWrites(`UPDATE rates SET v = v WHERE id = 7`), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	require.Len(t, res.Scenarios, 1)
	assert.Equal(t, result.Idempotent, res.Scenarios[0].Verdict, "%+v", res.Scenarios[0].StateDiff)
}

// A table written through a trigger the job's statement fires is
// compared too.
func TestFindsWriteThroughTrigger(t *testing.T) {
	schema := fixtureSchema + `
CREATE TABLE log (what text);
CREATE FUNCTION note() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN INSERT INTO log VALUES ('rate ' || NEW.id); RETURN NEW; END$$;
CREATE TRIGGER note AFTER UPDATE ON rates FOR EACH ROW EXECUTE FUNCTION note();
`
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(schema)}, Faults: []faults.Fault{faults.RunTwice()}}
	// The update leaves rates as it was; only the trigger's row differs.
	res, err := harness.Run(t.Context(), redeliveryWrites(`UPDATE rates SET v = v WHERE id = 7`), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	require.Len(t, res.Scenarios, 1)
	s := res.Scenarios[0]
	assert.Equal(t, result.NotIdempotent, s.Verdict)
	require.Len(t, s.StateDiff, 1)
	assert.Equal(t, "log", s.StateDiff[0].Table)
}
