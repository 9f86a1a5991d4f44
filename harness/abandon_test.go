package harness_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/effects"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/recordtb"
)

// deadlineTB is a recorder whose context ends at a deadline, so a check
// that would wait forever fails the test instead of hanging it.
type deadlineTB struct {
	*recordtb.T
	ctx context.Context
}

func (d deadlineTB) Context() context.Context { return d.ctx }

// reconnecting is a handler whose database client, once its connection is
// cut, reconnects with growing backoff until the test releases it. Deaf to
// ctx, it keeps going after its delivery died, as a real client's retry
// loop does; after the release it tries one more email and reports what
// that call returned on late.
type reconnecting struct {
	release   chan struct{} // closed by the test once the check has returned
	deaf      bool          // ignores ctx
	late      chan error
	mu        sync.Mutex
	reconnect int
}

func (h *reconnecting) handle(ctx context.Context, d *harness.Delivery) error {
	_, err := d.DB.Exec(ctx, `UPDATE counter SET n = n + 1`)
	if err == nil {
		return nil
	}
	for i := 1; ; i++ {
		done := ctx.Done()
		if h.deaf {
			done = nil
		}
		select {
		case <-h.release:
			if h.deaf {
				h.late <- d.Mail().Send(context.Background(), effects.Email{To: "ops@example.com", Subject: "gave up"})
			}
			return err
		case <-done:
			return ctx.Err()
		case <-time.After(min(time.Duration(i)*10*time.Millisecond, 200*time.Millisecond)):
		}
		c, cerr := pgx.Connect(context.Background(), d.DSN)
		if cerr == nil {
			_ = c.Close(context.Background())
			return errors.New("a dead delivery reconnected")
		}
		h.mu.Lock()
		h.reconnect++
		h.mu.Unlock()
	}
}

// A dead worker is abandoned at once: the scenario goes on while its
// goroutine still retries, the verdict is the right one, the goroutine is
// reported once, and what it does afterwards is refused. The handler is
// released only after the check returns, so a harness that waits for it
// would run into the test's deadline.
func TestDeadWorkerIsNotWaitedFor(t *testing.T) {
	tests := []struct {
		name      string
		deaf      bool
		straggler bool   // the check reports its goroutine still running
		straggles string // the straggler's name in the note
	}{
		{
			name: "a client deaf to ctx", deaf: true,
			straggler: true, straggles: "j1a1w1 in crash-mid-job (schedule j1a1w1!crash:1 > +30s j1a2w2)",
		},
		{name: "a client that stops on ctx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &reconnecting{release: make(chan struct{}), deaf: tt.deaf, late: make(chan error, 1)}
			released := false
			release := func() {
				if !released {
					released = true
					close(h.release)
				}
			}
			t.Cleanup(release)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			rec := recordtb.New(t)
			var res *harness.Result
			rec.Run(func(testing.TB) {
				res = harness.Check(deadlineTB{T: rec, ctx: ctx}, harness.Job{Name: "reconnecting", Handler: h.handle}, harness.Config{
					Setup:  []harness.Setup{harness.SQL(`CREATE TABLE counter (n int NOT NULL); INSERT INTO counter VALUES (0);`)},
					Faults: []faults.Fault{faults.CrashAt(1)},
					// Long enough that only abandoning the worker ends the
					// scenario before the test's deadline.
					DeliveryTimeout: time.Hour,
				})
			})
			require.NotNil(t, res, "the check did not run: %v", rec.Errors())
			require.Len(t, res.Scenarios, 1)
			sc := res.Scenarios[0]
			assert.Equal(t, result.Idempotent, sc.Verdict, "%+v", sc)
			assert.Empty(t, rec.Errors())
			require.Len(t, sc.Deliveries, 2, "no queue retry: the redelivery completed the job")
			first := sc.Deliveries[0]
			assert.Equal(t, "crashed before step 1 reached the server: UPDATE counter SET n = n + 1", first.Fault)
			assert.Empty(t, first.Err, "a dead delivery's return value is ignored")
			assert.Empty(t, sc.Deliveries[1].Err)

			h.mu.Lock()
			tried := h.reconnect
			h.mu.Unlock()
			if tt.deaf {
				assert.Positive(t, tried, "the handler reconnected in vain before the check ended")
			}

			var notes []string
			for _, l := range rec.Logs() {
				if strings.Contains(l, "still running") {
					notes = append(notes, l)
				}
			}
			if tt.straggler {
				require.Len(t, notes, 1, "reported once")
				assert.Contains(t, notes[0], "[twice] 1 handler goroutine of deliveries that had ended or died still running when the check ended, not waited for: "+tt.straggles+".")
			} else {
				assert.Empty(t, notes, "a handler that stops on its context returns within the grace")
			}

			release()
			if tt.deaf {
				select {
				case err := <-h.late:
					require.Error(t, err, "an email sent by the abandoned worker after its scenario")
					assert.Contains(t, err.Error(), "is dead; the effect was not made")
				case <-ctx.Done():
					t.Fatal("the abandoned worker's late email blocked: its delivery's context was not cancelled")
				}
			}
		})
	}
}
