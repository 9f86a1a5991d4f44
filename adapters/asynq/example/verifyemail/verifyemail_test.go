package verifyemail_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twiceasynq "github.com/runtwice/twice/adapters/asynq"
	"github.com/runtwice/twice/adapters/asynq/example/verifyemail"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
)

type mailer struct{ m *effects.Mailer }

func (m mailer) Send(ctx context.Context, to, subject, body string) error {
	return m.m.Send(ctx, effects.Email{To: to, Subject: subject, Body: body})
}

func job(t *testing.T) harness.Job {
	task, err := verifyemail.NewTask("alice")
	require.NoError(t, err)
	return twiceasynq.Job("send-verify-email", task, func(d *harness.Delivery) asynq.Handler {
		return &verifyemail.Processor{DB: d.DB, Mail: mailer{d.Mail()}}
	})
}

// A task enqueued with ProcessIn(10s), as simplebank enqueues its verify
// email, is checked where it runs: the harness clock moves to its due
// time (the adapter answers Fetched.DueAt), so the handler's steps are the
// plan and take every fault, and the worker, which inserts a code and
// sends a mail with no deduplication, is found not idempotent under a
// crash mid-job, a lost commit reply and a lost mail reply.
func TestProcessInIsCheckedWhereItRuns(t *testing.T) {
	if _, ok := reflect.TypeFor[result.DeliveryOutcome]().FieldByName("Waited"); !ok {
		t.Skip("this harness does not move its clock to Fetched.DueAt yet (issue 23 item 5, the qcore branch): the test passes once that is merged")
	}
	res, err := harness.Run(t.Context(), job(t), harness.Config{Setup: []harness.Setup{harness.SQL(verifyemail.Schema)}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	found := map[faults.Name]bool{}
	for _, s := range res.Scenarios {
		if s.Verdict == result.NotIdempotent {
			found[s.Fault] = true
		}
	}
	for _, f := range []faults.Name{faults.NameCrashMidJob, faults.NameAmbiguousCommit, faults.NameEffectLostReply} {
		assert.True(t, found[f], "%s should find the second code and mail: %s", f, res)
	}
}
