package queue_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness/queue"
)

// The model's default visibility timeout is the faults package's, which
// this package does not import.
func TestModelDefaultIsFaults(t *testing.T) {
	assert.Equal(t, faults.DefaultVisibilityTimeout, queue.Model{}.Rules().Redeliver)
}

func TestModelRules(t *testing.T) {
	for _, tt := range []struct {
		name  string
		model queue.Model
		want  queue.Rules
	}{
		{"default", queue.Model{}, queue.Rules{Redeliver: 30 * time.Second}},
		{"timeout", queue.Model{VisibilityTimeout: time.Minute}, queue.Rules{Redeliver: time.Minute}},
		{"cancel at the default", queue.Model{CancelAtVisibilityTimeout: true}, queue.Rules{Redeliver: 30 * time.Second, CancelAfter: 30 * time.Second}},
		{"cancel at the timeout", queue.Model{VisibilityTimeout: time.Hour, CancelAtVisibilityTimeout: true}, queue.Rules{Redeliver: time.Hour, CancelAfter: time.Hour}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.model.Rules())
		})
	}
}

// The model hands every delivery out, acks a success and retries anything
// else after its visibility timeout; it needs no schema.
func TestModelOperations(t *testing.T) {
	ctx := context.Background()
	m := queue.Model{VisibilityTimeout: 2 * time.Minute}
	assert.True(t, m.Schema().IsZero())
	enq, err := m.Enqueue(ctx, queue.Op{Job: 2})
	require.NoError(t, err)
	assert.Equal(t, queue.Enqueued{JobID: "twice-job-2"}, enq)
	f, err := m.Fetch(ctx, queue.Op{Job: 2, JobID: enq.JobID, Kind: queue.DeliveryProducerCopy})
	require.NoError(t, err)
	assert.Equal(t, queue.Fetched{Delivered: true}, f)
	ack, err := m.Ack(ctx, queue.Op{Job: 2, JobID: enq.JobID})
	require.NoError(t, err)
	assert.Equal(t, queue.Settled{Outcome: queue.Completed}, ack)
	nack, err := m.Nack(ctx, queue.Op{Job: 2, JobID: enq.JobID}, errors.New("boom"))
	require.NoError(t, err)
	assert.Equal(t, queue.Settled{Outcome: queue.Retry, After: 2 * time.Minute}, nack)
}

func TestSettlement(t *testing.T) {
	for _, tt := range []struct {
		s                  queue.Settlement
		name               string
		finished, complete bool
	}{
		{queue.Completed, "completed", true, true},
		{queue.Retry, "retry", false, false},
		{queue.Snoozed, "snoozed", false, false},
		{queue.Cancelled, "cancelled", true, true},
		{queue.Discarded, "discarded", true, false},
		{queue.Settlement(0), "Settlement(0)", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.name, tt.s.String())
			assert.Equal(t, tt.finished, tt.s.Finished())
			assert.Equal(t, tt.complete, tt.s.Complete())
		})
	}
}

func TestSchemaIsZero(t *testing.T) {
	assert.True(t, queue.Schema{}.IsZero())
	assert.True(t, queue.Schema{Name: "named only"}.IsZero())
	assert.False(t, queue.Schema{SQL: "CREATE TABLE t (id int)"}.IsZero())
	assert.False(t, queue.Schema{Name: "go", Apply: func(context.Context, *pgx.Conn) error { return nil }}.IsZero())
}

// An adapter depends on twice only for harness.Job: the SPI imports no
// other package of twice's.
func TestImportsNothingOfTwice(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/runtwice/twice/harness/queue").Output()
	require.NoError(t, err)
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/runtwice/twice") {
			assert.Equal(t, "github.com/runtwice/twice/harness/queue", dep, "harness/queue imports %s", dep)
		}
	}
}
