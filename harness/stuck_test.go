package harness_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/internal/blame"
)

// loggingTB keeps what the check logs.
type loggingTB struct {
	testing.TB
	mu   sync.Mutex
	logs []string
}

func (l *loggingTB) Logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.logs = append(l.logs, fmt.Sprintf(format, args...))
}

// A handler stuck on a redelivery until its DeliveryTimeout: the progress
// line said "0 of 1 scenarios done" and nothing of what it waited on. It
// names the stuck delivery and where it is (issue 27).
func TestProgressNamesTheStuckDelivery(t *testing.T) {
	defer harness.SetVerbose(50 * time.Millisecond)()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	job := harness.Job{Name: "stuck-retry", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if _, err := d.DB.Exec(ctx, `UPDATE users SET is_email_verified = true WHERE id = 1`); err != nil {
			return err
		}
		if d.Attempt == 2 {
			select {
			case <-release:
			case <-ctx.Done(): // cancelled once the harness gave up on it
				return ctx.Err()
			}
		}
		return nil
	}}
	lt := &loggingTB{TB: t}
	harness.Check(lt, job, harness.Config{
		Setup:           []harness.Setup{harness.SQL(usersSchema)},
		Faults:          []faults.Fault{faults.RunTwice()},
		DeliveryTimeout: 2 * time.Second,
	})
	lt.mu.Lock()
	defer lt.mu.Unlock()
	want := `; waiting `
	named := `on delivery j1a2w2 (attempt 2) of schedule j1a1w1 > j1a2w2 (run-twice): it was in its own code after step 1 finished (UPDATE users SET is_email_verified = true WHERE id = 1), before step 2 reached the server`
	found := false
	for _, l := range lt.logs {
		if strings.HasPrefix(l, `[twice] job "stuck-retry": 0 of 1 scenarios done after `) && strings.Contains(l, want) && strings.HasSuffix(l, named) {
			found = true
		}
	}
	assert.True(t, found, "no progress line names the stuck delivery; logged:\n%s", strings.Join(lt.logs, "\n"))
}

// A handler deaf to its context on every redelivery hung each scenario
// of the matrix for the whole DeliveryTimeout. The check now stops at the
// first such delivery, with the user's error naming it.
func TestDeafHandlerStopsTheCheck(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	job := harness.Job{Name: "deaf-retry", Handler: func(ctx context.Context, d *harness.Delivery) error {
		if _, err := d.DB.Exec(ctx, `UPDATE users SET is_email_verified = true WHERE id = 1`); err != nil {
			return err
		}
		if d.Attempt > 1 {
			<-release // deaf to ctx
		}
		return nil
	}}
	t.Setenv(harness.ParallelEnv, "1")
	res, err := harness.Run(t.Context(), job, harness.Config{
		Setup:           []harness.Setup{harness.SQL(usersSchema)},
		DeliveryTimeout: time.Second,
	})
	if res != nil {
		res.DropDatabases(context.Background())
	}
	if assert.Error(t, err) {
		assert.Contains(t, blame.Message(err), `[twice] job "deaf-retry": delivery j1a2w2 (attempt 2) of schedule j1a1w1 > j1a2w2 (run-twice) hung: handler did not return within 1s (Config.DeliveryTimeout); it was in its own code after step 1 finished (UPDATE users SET is_email_verified = true WHERE id = 1), before step 2 reached the server, and it went on after its context was cancelled`)
		assert.True(t, blame.IsUser(err))
	}
}
