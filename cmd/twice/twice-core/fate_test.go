package main

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/record"
	"github.com/runtwice/twice/internal/report"
)

// The fate of every step in report.json is the one the check's Go result
// holds, for every kind of fault: the runner copies the harness's fact
// and works nothing out again.
func TestReportFatesAreTheResultsFates(t *testing.T) {
	// Counts once per delivery, outside a transaction, then mails and
	// logs: a second delivery past step 1 always differs, so every
	// schedule below is a finding, in the report with its deliveries.
	handler := func(ctx context.Context, d *harness.Delivery) error {
		if _, err := d.DB.Exec(ctx, `UPDATE counter SET n = n + 1`); err != nil {
			return err
		}
		if err := d.Mail().Send(ctx, effects.Email{To: "a@example.com", Subject: "counted"}); err != nil {
			return err
		}
		_, err := d.DB.Exec(ctx, `INSERT INTO log VALUES ($1)`, d.Attempt)
		return err
	}
	schedules := []string{
		"j1a1w1!crash:3 > +30s j1a2w2",      // a statement kept from the server
		"j1a1w1!crash:2 > +30s j1a2w2",      // an effect call kept from the provider
		"j1a1w1!crash > +30s j1a2w2",        // after the last step, before the ack
		"j1a1w1!ambiguous:1 > +30s j1a2w2",  // a statement applied, its reply lost
		"j1a1w1!crashafter:2 > +30s j1a2w2", // an effect made, then the worker died
		"j1a1w1!lostack > +30s j1a2w2",
		"j1a1w1!lostreply:2", // the effect made, the call timed out
		"j1a1w1!failed:2",    // the effect refused
		// d1's UPDATE runs with its commit held; d2's waits on its row lock.
		"j1a1w1 > j2a1w2@1:0 order 1~,2,1,1,2,2",
	}
	cfg := harness.Config{Setup: []harness.Setup{harness.SQL(`CREATE TABLE counter (n int NOT NULL); INSERT INTO counter VALUES (0); CREATE TABLE log (attempt int NOT NULL);`)}}
	for _, text := range schedules {
		s, err := faults.Parse(text)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Faults = append(cfg.Faults, faults.Replay(s))
	}
	res, err := harness.Run(t.Context(), harness.Job{Name: "count-and-mail", Handler: handler}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })

	b := &builder{runs: newTestRuns(), dirs: map[string]string{}, cwd: "/src/twice"}
	job := b.job([]record.Record{{Dir: "/src/twice", Test: "TestFates", Result: &res.Result}})
	data, err := json.Marshal(report.Report{Schema: report.SchemaVersion, Jobs: []report.Job{job}})
	if err != nil {
		t.Fatal(err)
	}
	// report.json as a reader decodes it, nothing of this package's types.
	var file struct {
		Jobs []struct {
			Findings []struct {
				Schedule   string `json:"schedule"`
				Deliveries []struct {
					Label   string `json:"label"`
					Died    bool   `json:"died"`
					AckLost bool   `json:"ack_lost"`
					Steps   []struct {
						Fate string `json:"fate"`
					} `json:"steps"`
				} `json:"deliveries"`
			} `json:"findings"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	findings := map[string]int{}
	for i, f := range file.Jobs[0].Findings {
		findings[f.Schedule] = i
	}
	seen := map[result.Fate]bool{}
	var died, ackLost bool
	for _, sc := range res.Scenarios {
		i, ok := findings[sc.Schedule.String()]
		if !ok {
			t.Errorf("%s: no finding in report.json (verdict %s)", sc.Schedule, sc.Verdict)
			continue
		}
		f := file.Jobs[0].Findings[i]
		if len(f.Deliveries) != len(sc.Deliveries) {
			t.Errorf("%s: %d deliveries in report.json, %d in the result", sc.Schedule, len(f.Deliveries), len(sc.Deliveries))
			continue
		}
		for k, o := range sc.Deliveries {
			var want, got []string
			for _, st := range o.Steps {
				want = append(want, string(st.Fate))
				seen[st.Fate] = true
			}
			for _, st := range f.Deliveries[k].Steps {
				got = append(got, st.Fate)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s %s: fates in report.json %q, in the result %q", sc.Schedule, o.Delivery.Label(), got, want)
			}
			if f.Deliveries[k].Died != o.Died || f.Deliveries[k].AckLost != o.AckLost {
				t.Errorf("%s %s: report.json died=%v ack_lost=%v, the result %v %v", sc.Schedule, o.Delivery.Label(), f.Deliveries[k].Died, f.Deliveries[k].AckLost, o.Died, o.AckLost)
			}
			died, ackLost = died || o.Died, ackLost || o.AckLost
		}
	}
	// The schedules must produce every fate a fault makes, or the test
	// above proves less than it says.
	for _, f := range []result.Fate{result.Ran, result.CrashedBefore, result.ReplyLost, result.CrashedAfter, result.TimedOut, result.Refused, result.CommitHeld, result.WaitedOnLock} {
		if !seen[f] {
			t.Errorf("no step was %s in the scenarios", f)
		}
	}
	if !died || !ackLost {
		t.Errorf("a delivery died: %v, lost its ack: %v; want both", died, ackLost)
	}
}
