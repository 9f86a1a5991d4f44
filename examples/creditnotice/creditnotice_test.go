package creditnotice_test

import (
	"context"
	"testing"

	"github.com/runtwice/twice/examples/creditnotice"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
)

// The job gets the delivery's pool and its mail fake where production
// passes its pool and its email provider's client.
var reward = harness.Job{Name: "reward-with-notice", Handler: func(ctx context.Context, d *harness.Delivery) error {
	r := creditnotice.Rewarder{DB: d.DB, Mail: mailer{d.Mail()}}
	return r.Reward(ctx, 77, 9812)
}}

// mailer sends the job's emails through the harness's mail fake, which
// records each one as an effect.
type mailer struct{ fake *effects.Mailer }

func (m mailer) Send(ctx context.Context, e creditnotice.Email) error {
	return m.fake.Send(ctx, effects.Email{To: e.To, Subject: e.Subject, Body: e.Body})
}

// Only the ambiguous commit finds it: the points are there, and so is an
// email saying they are not.
func TestRewardWithNotice(t *testing.T) {
	res := harness.Check(t, reward, harness.Config{
		Setup:         []harness.Setup{harness.SQL(creditnotice.Schema)},
		ExpectFinding: "an ambiguous commit sends a false 'could not credit' email",
		ExpectPattern: result.EffectWithoutRecord,
	})
	for _, s := range res.Scenarios {
		want := result.Idempotent
		if s.Fault == faults.NameAmbiguousCommit {
			want = result.NotIdempotent
		}
		if s.Verdict != want {
			t.Errorf("scenario %s (%s) = %s, want %s", s.Fault, s.Schedule, s.Verdict, want)
		}
		if s.Fault == faults.NameAmbiguousCommit && (len(s.StateDiff) != 0 || s.EffectDiff == nil || s.EffectDiff.Extra != 1) {
			t.Errorf("ambiguous commit: want the state of one clean run and one extra email, got state %v effects %v", s.StateDiff, s.EffectDiff)
		}
	}
}
