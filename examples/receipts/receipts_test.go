package receipts_test

import (
	"context"
	"testing"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/examples/receipts"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/internal/golden"
	"github.com/runtwice/twice/internal/recordtb"
)

// Receipts are at-least-once: a rare duplicate beats a missing receipt.
var config = harness.Config{
	Setup:          []harness.Setup{harness.SQL(receipts.Schema)},
	EffectPolicies: map[string]assert.Policy{"email": assert.AtLeastOnce},
}

var (
	sendThenMark = harness.Job{Name: "receipt-send-then-mark", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return receipts.SendThenMark(ctx, d, 9812)
	}}
	markThenSend = harness.Job{Name: "receipt-mark-then-send", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return receipts.MarkThenSend(ctx, d, 9812)
	}}
)

func TestSendThenMark(t *testing.T) {
	cfg := config
	// After a crash between the send and the mark, the redelivery sends
	// again and records its own time, later on the harness clock: the
	// time of the duplicate at-least-once tolerates.
	cfg.IgnoreColumns = []string{"orders.receipt_sent_at"}
	res := harness.Check(t, sendThenMark, cfg)
	// The duplicates it makes are the tolerated ones: a crash between the
	// send and the mark, or two deliveries at once.
	dups := 0
	for _, s := range res.Scenarios {
		n := 0
		for _, e := range s.Effects {
			if e.Happened() {
				n++
			}
		}
		if n > 1 {
			dups++
		}
	}
	if dups == 0 {
		t.Errorf("no scenario sent a second receipt; the crash between send and mark was not exercised")
	}
}

func TestMarkThenSend(t *testing.T) {
	cfg := config
	cfg.ExpectFinding = "a crash between the mark and the send loses the receipt"
	harness.Check(t, markThenSend, cfg)
}

func TestMarkThenSendFinding(t *testing.T) {
	cfg := config
	cfg.Faults = nil
	rec := recordtb.New(t)
	var res *harness.Result
	rec.Run(func(tb testing.TB) { res = harness.Check(tb, markThenSend, cfg) })
	if len(rec.Errors()) != 1 {
		t.Fatalf("Check reported %d errors, want 1: %q", len(rec.Errors()), rec.Errors())
	}
	for _, s := range res.Failed() {
		if s.EffectDiff == nil || s.EffectDiff.Missing != 1 {
			t.Errorf("scenario %s (%s): want one missing receipt, got %v", s.Fault, s.Schedule, s.EffectDiff)
		}
		if len(s.StateDiff) != 0 {
			t.Errorf("scenario %s: the database matches one clean run, yet StateDiff = %v", s.Fault, s.StateDiff)
		}
	}
	golden.Equal(t, "mark-then-send-finding.txt", rec.Errors()[0])
}
