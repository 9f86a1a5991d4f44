package orderstatus_test

import (
	"context"
	"testing"

	"github.com/runtwice/twice/examples/orderstatus"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/internal/golden"
	"github.com/runtwice/twice/internal/recordtb"
)

var (
	config = harness.Config{Setup: []harness.Setup{harness.SQL(orderstatus.Schema)}}

	markShipped = harness.Job{Name: "mark-shipped", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return orderstatus.MarkShipped(ctx, d.DB, 9812)
	}}
	advance = harness.Job{Name: "advance-status", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return orderstatus.Advance(ctx, d.DB, 9812)
	}}
)

func TestMarkShipped(t *testing.T) {
	harness.Check(t, markShipped, config)
}

func TestAdvance(t *testing.T) {
	cfg := config
	cfg.ExpectFinding = "a second delivery advances the order past shipped"
	harness.Check(t, advance, cfg)
}

func TestAdvanceFinding(t *testing.T) {
	rec := recordtb.New(t)
	rec.Run(func(tb testing.TB) { harness.Check(tb, advance, config) })
	errs := rec.Errors()
	if len(errs) != 1 {
		t.Fatalf("Check reported %d errors, want 1: %q", len(errs), errs)
	}
	golden.Equal(t, "advance-finding.txt", errs[0])
}
