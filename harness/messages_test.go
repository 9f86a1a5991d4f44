package harness_test

import (
	"context"
	"strings"
	"testing"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/examples/loyalty"
	"github.com/runtwice/twice/examples/orderstatus"
	"github.com/runtwice/twice/examples/processedjobs"
	"github.com/runtwice/twice/examples/receipts"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/golden"
	"github.com/runtwice/twice/internal/recordtb"
)

// The messages a developer reads when Check finds one of the examples'
// broken jobs, pinned in testdata/messages. They live here, not in the
// examples, because a recording stand-in for the test is harness's own
// test tooling, not public API.
func TestFindingMessages(t *testing.T) {
	tests := []struct {
		name string
		job  harness.Job
		cfg  harness.Config
		// check says what the result must hold besides the message.
		check func(t *testing.T, res *harness.Result)
	}{
		{
			name: "increment-finding",
			job: harness.Job{Name: "reward-by-increment", Handler: func(ctx context.Context, d *harness.Delivery) error {
				return loyalty.RewardByIncrement(ctx, d.DB, 77, 9812)
			}},
			cfg: harness.Config{Setup: []harness.Setup{harness.SQLFiles("../examples/loyalty/schema.sql")}},
		},
		{
			name: "advance-finding",
			job: harness.Job{Name: "advance-status", Handler: func(ctx context.Context, d *harness.Delivery) error {
				return orderstatus.Advance(ctx, d.DB, 9812)
			}},
			cfg: harness.Config{Setup: []harness.Setup{harness.SQL(orderstatus.Schema)}},
		},
		{
			name: "by-job-id-finding",
			job: harness.Job{Name: "processed-by-job-id", Handler: func(ctx context.Context, d *harness.Delivery) error {
				return processedjobs.ByJobID(ctx, d.DB, d.JobID, 77, 9812)
			}},
			cfg: harness.Config{Setup: []harness.Setup{harness.SQL(processedjobs.Schema)}},
		},
		{
			name: "mark-then-send-finding",
			job: harness.Job{Name: "receipt-mark-then-send", Handler: func(ctx context.Context, d *harness.Delivery) error {
				s := receipts.Sender{DB: d.DB, Mail: receiptMailer{d.Mail()}, Now: d.Now}
				return s.MarkThenSend(ctx, 9812)
			}},
			cfg: harness.Config{
				Setup:          []harness.Setup{harness.SQL(receipts.Schema)},
				EffectPolicies: map[string]assert.Policy{"email": assert.AtLeastOnce},
			},
			check: func(t *testing.T, res *harness.Result) {
				for _, s := range res.Failed() {
					if s.EffectDiff == nil || s.EffectDiff.Missing != 1 {
						t.Errorf("scenario %s (%s): want one missing receipt, got %v", s.Fault, s.Schedule, s.EffectDiff)
					}
					if len(s.StateDiff) != 0 {
						t.Errorf("scenario %s: the database matches one clean run, yet StateDiff = %v", s.Fault, s.StateDiff)
					}
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := recordtb.New(t)
			var res *harness.Result
			rec.Run(func(tb testing.TB) { res = harness.Check(tb, tt.job, tt.cfg) })
			errs := rec.Errors()
			if len(errs) != 1 {
				t.Fatalf("Check reported %d errors, want 1: %q", len(errs), errs)
			}
			if res.Idempotent() || res.Outcome != result.OutcomeFinding {
				t.Errorf("Outcome = %q, Idempotent() = %v; want a finding", res.Outcome, res.Idempotent())
			}
			if !strings.HasPrefix(errs[0], "[twice] not idempotent: ") {
				t.Errorf("error does not start with the finding tag:\n%s", errs[0])
			}
			if tt.check != nil {
				tt.check(t, res)
			}
			golden.Equal(t, "messages/"+tt.name+".txt", errs[0])
		})
	}
}

// receiptMailer sends the receipts job's emails through the mail fake.
type receiptMailer struct{ fake *effects.Mailer }

func (m receiptMailer) Send(ctx context.Context, e receipts.Email) error {
	return m.fake.Send(ctx, effects.Email{To: e.To, Subject: e.Subject, Body: e.Body})
}
