package welcomemail_test

import (
	"context"
	"strings"
	"testing"

	"github.com/runtwice/twice/assert"
	"github.com/runtwice/twice/examples/welcomemail"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

// A welcome email is at-least-once: a rare duplicate beats a user left
// without one. The timestamps are the harness clock's at the delivery
// that wrote them, later on a redelivery.
var config = harness.Config{
	Setup:          []harness.Setup{harness.SQL(welcomemail.Schema)},
	EffectPolicies: map[string]assert.Policy{"email": assert.AtLeastOnce},
	IgnoreColumns:  []string{"users.activated_at", "outbox.sent_at"},
}

var (
	sendEveryTime = harness.Job{Name: "welcome-send-every-time", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return welcomer(d).SendEveryTime(ctx, 42)
	}}
	sendOnce = harness.Job{Name: "welcome-send-once", Handler: func(ctx context.Context, d *harness.Delivery) error {
		return welcomer(d).SendOnce(ctx, 42)
	}}
)

// welcomer wires the job to the delivery: its pool, the harness clock,
// and its SMTP sink where production gives the relay's address. The job
// sends with net/smtp and PlainAuth as it does in production.
func welcomer(d *harness.Delivery) welcomemail.Welcomer {
	return welcomemail.Welcomer{DB: d.DB, Now: d.Now, Relay: welcomemail.Relay{
		Addr: d.SMTPAddr(), Username: "shop", Password: "secret", From: "shop@example.com",
	}}
}

// Every redelivery of a delivery that had sent the email sends it again:
// after a run twice, a producer's retry, a crash before the ack, a lost
// ack, and a redrive of a delivery that crashed before its ack. Those
// duplicates come where no delivery overlapped and none died between
// the email and a record of it, so at-least-once does not excuse them.
// Each such scenario holds the state of one clean run and one email
// more; every other scenario passes.
func TestSendEveryTime(t *testing.T) {
	cfg := config
	cfg.ExpectFinding = "every redelivery sends the welcome email again"
	cfg.ExpectPattern = result.EffectWithoutRecord
	res := harness.Check(t, sendEveryTime, cfg)
	for _, s := range res.Scenarios {
		want := result.Idempotent
		switch s.Fault {
		case faults.NameRunTwice, faults.NameProducerRetry, faults.NameCrashBeforeAck, faults.NameLostAck:
			want = result.NotIdempotent
		case faults.NameRedrive:
			if first := s.Schedule.Deliveries[0]; first.Fault == faults.KindCrash && first.At == 0 {
				want = result.NotIdempotent // it crashed after the send, before the ack
			}
		}
		if s.Verdict != want {
			t.Errorf("scenario %s (%s) = %s, want %s", s.Fault, s.Schedule, s.Verdict, want)
		}
		if want == result.NotIdempotent && (len(s.StateDiff) != 0 || s.EffectDiff == nil || s.EffectDiff.Extra != 1 || s.EffectDiff.Missing != 0) {
			t.Errorf("scenario %s (%s): want the state of one clean run and one extra email, got state %v effects %v", s.Fault, s.Schedule, s.StateDiff, s.EffectDiff)
		}
	}
}

// The outbox row, written with the activation, keeps a redelivery from
// sending again; the only duplicates are the ones at-least-once allows.
// The SMTP faults reach the job through net/smtp itself: a lost reply
// after DATA fails SendMail although the email went out, so the queue's
// retry sends it again (tolerated: the provider's answer was lost); a
// refusal fails SendMail with nothing sent, and the retry sends the one
// email.
func TestSendOnce(t *testing.T) {
	res := harness.Check(t, sendOnce, config)
	seen := map[faults.Name]bool{}
	for _, s := range res.Scenarios {
		if s.Fault != faults.NameEffectLostReply && s.Fault != faults.NameEffectFailed {
			continue
		}
		seen[s.Fault] = true
		first := s.Deliveries[0]
		hit := first.Faulted()
		if hit == nil || !hit.IsEffect() {
			t.Fatalf("scenario %s (%s): the fault did not hit the email step: %+v", s.Fault, s.Schedule, first.Steps)
		}
		if first.Err == "" {
			t.Errorf("scenario %s: SendMail returned no error to the job under the fault", s.Fault)
		}
		var happened, lost, refused int
		for _, e := range s.Effects {
			switch {
			case e.ReplyLost:
				lost++
			case !e.Happened():
				refused++
			}
			if e.Happened() {
				happened++
			}
		}
		want := [3]int{1, 0, 1} // happened, lost, refused: the retry's email, the refusal
		if s.Fault == faults.NameEffectLostReply {
			want = [3]int{2, 1, 0} // the email whose answer was lost, and the retry's
		}
		if got := [3]int{happened, lost, refused}; got != want {
			t.Errorf("scenario %s: emails (happened, reply lost, refused) = %v, want %v; effects %v", s.Fault, got, want, s.Effects)
		}
	}
	// One shard of a split run (twice report -shard) may be dealt neither.
	if res.Shard == nil && (!seen[faults.NameEffectLostReply] || !seen[faults.NameEffectFailed]) {
		t.Errorf("the default matrix put no lost reply or refusal on the SMTP send: %v", seen)
	}
}

// A worker that dies right after the relay accepted the email, before
// the outbox says so (a schedule exploration draws; replayed here): the
// redelivery sends it again, the one duplicate at-least-once allows.
func TestSendOnceCrashAfterSend(t *testing.T) {
	sched, err := faults.Parse("j1a1w1!crashafter:6 > +30s j1a2w2")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config
	cfg.Faults = []faults.Fault{faults.Replay(sched)}
	res := harness.Check(t, sendOnce, cfg)
	if res.Shard != nil && len(res.Scenarios) == 0 {
		return // another shard of a split run (twice report -shard) runs it
	}
	if len(res.Scenarios) != 1 {
		t.Fatalf("%d scenarios, want the one replayed", len(res.Scenarios))
	}
	var by []int
	for _, e := range res.Scenarios[0].Effects {
		if e.Happened() {
			by = append(by, e.Attempt)
		}
	}
	if len(by) != 2 || by[0] != 1 || by[1] != 2 {
		t.Errorf("emails sent by attempts %v, want [1 2]: the dead worker's, then the redelivery's", by)
	}
}

// A permanent refusal (Providers.SMTP.PermanentRefusal: "550 5.7.1")
// reaches the job as net/smtp's SendMail error, and the job returns it:
// nothing was sent, and the queue's retry sends the one email.
func TestSendOncePermanentRefusal(t *testing.T) {
	cfg := config
	cfg.Providers.SMTP.PermanentRefusal = true
	cfg.Faults = []faults.Fault{faults.EffectFailures()}
	res := harness.Check(t, sendOnce, cfg)
	if res.Shard != nil && len(res.Scenarios) == 0 {
		return // another shard of a split run (twice report -shard) runs it
	}
	if len(res.Scenarios) != 1 {
		t.Fatalf("%d scenarios, want one refusal of the one send", len(res.Scenarios))
	}
	s := res.Scenarios[0]
	if first := s.Deliveries[0]; !strings.HasPrefix(first.Err, "550 ") || !strings.Contains(first.Err, "5.7.1 email provider") {
		t.Errorf("first delivery returned %q, want SendMail's 550 5.7.1", first.Err)
	}
	sent := 0
	for _, e := range s.Effects {
		if e.Happened() {
			sent++
		}
	}
	if len(s.Effects) != 2 || sent != 1 {
		t.Errorf("effects %v, want the refused message and the retry's one email", s.Effects)
	}
}
