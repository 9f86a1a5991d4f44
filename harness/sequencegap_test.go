package harness_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twiceassert "github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/internal/golden"
	"github.com/runtwice/twice/internal/recordtb"
)

// An invoice number drawn from a sequence inside text: the catalog does
// not know the column is sequence-drawn, so a redelivery after a
// rolled-back attempt writes X-2 where the clean run wrote X-1.
const invoiceSchema = `
CREATE SEQUENCE doc_seq;
CREATE TABLE orders (id bigint PRIMARY KEY, invoiced boolean NOT NULL DEFAULT false);
CREATE TABLE invoices (order_id bigint PRIMARY KEY REFERENCES orders, number text NOT NULL UNIQUE);
CREATE TABLE invoice_lines (number text NOT NULL REFERENCES invoices (number), item text NOT NULL);
INSERT INTO orders VALUES (9812);
`

// invoice is idempotent: a second delivery finds the invoice and writes
// nothing. Only its number can differ.
var invoice = harness.Job{Name: "invoice-order", Handler: func(ctx context.Context, d *harness.Delivery) error {
	return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
		var number string
		err := tx.QueryRow(ctx, `
INSERT INTO invoices (order_id, number) VALUES (9812, 'X-' || nextval('doc_seq'))
ON CONFLICT (order_id) DO NOTHING RETURNING number`).Scan(&number)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO invoice_lines VALUES ($1, 'tea')`, number); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE orders SET invoiced = true WHERE id = 9812`)
		return err
	})
}}

// Without the option the only difference is the gap, and the finding
// says so: which column, which sequence, and by how much a rolled-back
// attempt advanced it.
func TestSequenceGapExplained(t *testing.T) {
	rec := recordtb.New(t)
	var res *harness.Result
	rec.Run(func(tb testing.TB) {
		res = harness.Check(tb, invoice, harness.Config{Setup: []harness.Setup{harness.SQL(invoiceSchema)}})
	})
	errs := rec.Errors()
	require.Len(t, errs, 1)
	failed := res.Failed()
	require.NotEmpty(t, failed, "a crash inside the transaction burns a number")
	for _, s := range failed {
		for _, d := range s.StateDiff {
			if d.Table != "invoices" && d.Table != "invoice_lines" {
				t.Errorf("%s: table %s differs; only the numbers may", s.Schedule, d.Table)
				continue
			}
			want := []twiceassert.SequenceGap{{Column: d.Table + ".number", Sequence: "doc_seq", Ahead: 1}}
			if d.Table == "invoice_lines" {
				want[0].RankBy = "invoices.number" // its foreign key follows
			}
			assert.Equal(t, want, d.Gaps, "%s: %s", s.Schedule, d.Table)
		}
		assert.Len(t, s.Problems, len(s.StateDiff), "%s: nothing but the numbers differs", s.Schedule)
	}
	assert.Contains(t, errs[0], `invoices.number differs only in numbers from sequence doc_seq, which a rolled-back attempt advanced 1 value past the clean run; SequenceColumns: "invoices.number" compares it by rank, as serial columns are`)
	golden.Equal(t, "messages/sequence-gap-finding.txt", errs[0])
}

// With the column named, numbers compare by rank, as serial ids do, and
// the foreign key pointing at it follows: the job is quiet.
func TestSequenceColumnsQuietTheGap(t *testing.T) {
	res := harness.Check(t, invoice, harness.Config{
		Setup:           []harness.Setup{harness.SQL(invoiceSchema)},
		SequenceColumns: []string{"invoices.number"},
	})
	assert.True(t, res.Idempotent())
	burnt := false
	for _, s := range res.Scenarios {
		for _, d := range s.Deliveries {
			// Steps 4 and 5 come after the number was drawn; one crash
			// point of their class runs (faults.CrashClass).
			burnt = burnt || strings.HasPrefix(d.Fault, "crashed before step 4") || strings.HasPrefix(d.Fault, "crashed before step 5")
		}
	}
	assert.True(t, burnt, "no scenario crashed inside the transaction, after the number was drawn")
}

// A column that is not there is a typo, refused before anything runs.
func TestSequenceColumnsMustExist(t *testing.T) {
	for _, c := range []string{"invoices.numbr", "number"} {
		_, err := harness.Run(t.Context(), invoice, harness.Config{
			Setup:           []harness.Setup{harness.SQL(invoiceSchema)},
			SequenceColumns: []string{c},
		})
		require.Error(t, err, c)
		assert.Contains(t, err.Error(), `SequenceColumns: no column "`+c+`"`)
	}
}
