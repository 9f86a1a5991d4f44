package orderstatus_test

import (
	"context"
	"testing"

	"github.com/runtwice/twice/examples/orderstatus"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
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
	cfg.ExpectPattern = result.ResultChanged
	harness.Check(t, advance, cfg)
}
