package harness_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/internal/recordtb"
)

// A column filled from time.Now() instead of d.Now differs between the two
// clean runs and is left out: that was named only in report.json, so a
// passing check under -v hid that the column was never compared. Every
// pass now names what was left out, with the hint for wall-clock time
// (issue 27).
func TestPassNamesVolatileColumns(t *testing.T) {
	defer harness.SetVerbose(time.Hour)()
	rec := recordtb.New(t)
	job := harness.Job{Name: "stamp", Handler: func(ctx context.Context, d *harness.Delivery) error {
		_, err := d.DB.Exec(ctx, `INSERT INTO stamps (id, at) VALUES (1, $1) ON CONFLICT (id) DO NOTHING`, time.Now())
		return err
	}}
	rec.Run(func(tb testing.TB) {
		harness.Check(tb, job, harness.Config{
			Setup:  []harness.Setup{harness.SQL(`CREATE TABLE stamps (id int PRIMARY KEY, at timestamptz NOT NULL)`)},
			Faults: []faults.Fault{faults.RunTwice()},
		})
	})
	require.Empty(t, rec.Errors())
	var notes []string
	for _, l := range rec.Logs() {
		if strings.Contains(l, "volatile") {
			notes = append(notes, l)
		}
	}
	require.Len(t, notes, 1, "logs %q", rec.Logs())
	assert.Equal(t, `[twice] job "stamp": left out of every comparison as volatile (they differ between two clean runs): stamps.at; stamps.at holds a time: if the handler takes it from time.Now(), use d.Now, so that a time a redelivery moves is compared`, notes[0])
}
