package queuetest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
	"github.com/runtwice/twice/internal/recordtb"
)

// handOutAgain is queue.Model driven through the Queue interface, as an
// adapter is: it hands an acked job out again.
type handOutAgain struct{ queue.Model }

// handOutOnce hands each job out once: it never redelivers, after a
// crash, a lost ack or a failure alike.
type handOutOnce struct {
	queue.Model

	mu sync.Mutex
	// handed holds the jobs handed out in the execution on each
	// connection; Enqueue of job 1 starts it afresh.
	handed map[*pgx.Conn]map[string]bool
}

func (q *handOutOnce) Enqueue(ctx context.Context, op queue.Op) (queue.Enqueued, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.handed == nil || op.Job == 1 {
		if q.handed == nil {
			q.handed = map[*pgx.Conn]map[string]bool{}
		}
		q.handed[op.Conn] = map[string]bool{}
	}
	return q.Model.Enqueue(ctx, op)
}

func (q *handOutOnce) Fetch(_ context.Context, op queue.Op) (queue.Fetched, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.handed[op.Conn][op.JobID] {
		return queue.Fetched{Reason: "handed out once already", Done: true}, nil
	}
	q.handed[op.Conn][op.JobID] = true
	return queue.Fetched{Delivered: true, Attempt: 1}, nil
}

// sameJobID gives every copy job 1's ID.
type sameJobID struct{ handOutAgain }

func (q sameJobID) Enqueue(ctx context.Context, op queue.Op) (queue.Enqueued, error) {
	enq, err := q.handOutAgain.Enqueue(ctx, op)
	enq.JobID = "twice-job-1"
	return enq, err
}

// leakyTable makes a table of its own and leaves it out of Rules.
type leakyTable struct{ handOutAgain }

func (leakyTable) Schema() queue.Schema {
	return queue.Schema{SQL: `CREATE TABLE queue_leases (job_id text PRIMARY KEY)`}
}

// sharedCounter counts attempts across scenarios, as a queue whose
// storage outlives the execution does.
type sharedCounter struct {
	handOutAgain
	n atomic.Int64
}

func (q *sharedCounter) Fetch(context.Context, queue.Op) (queue.Fetched, error) {
	return queue.Fetched{Delivered: true, Attempt: int(q.n.Add(1))}, nil
}

// A queue that breaks a promise fails the rule that states it, with a
// message that says what the queue did; the rules it keeps pass.
func TestBrokenQueuesFail(t *testing.T) {
	for _, tt := range []struct {
		name  string
		queue func() queue.Queue
		opts  []Option
		want  map[string]string // rule: a piece of its failure
	}{
		{"hands out an acked job", func() queue.Queue { return handOutAgain{} }, nil, map[string]string{
			"ack-completes": "the acked job was handed out again (attempt 2, redelivery)",
		}},
		{"never redelivers", func() queue.Queue { return &handOutOnce{} }, nil, map[string]string{
			"crash-redelivers": "the job was not handed out again: handed out once already",
			"withheld-ack":     "the job was not handed out again: handed out once already",
			"failure-retries":  "the job was not handed out again after the crash",
		}},
		{"copies share an ID", func() queue.Queue { return sameJobID{} }, nil, map[string]string{
			"ack-completes": "the acked job was handed out again",
			"producer-copy": `the producer's copy has the original's JobID "twice-job-1", want one of its own`,
		}},
		{"acked by commit, handed out after it", func() queue.Queue { return handOutAgain{} }, []Option{AckedByCommit()}, map[string]string{
			"ack-completes": "the acked job was handed out again",
			"withheld-ack":  "the job was handed out again (attempt 2) or not held done (\"\"), but AckedByCommit says the handler's commit completed it",
		}},
		{"keeps a table in the comparison", func() queue.Queue { return leakyTable{} }, nil, map[string]string{
			"ack-completes": "the acked job was handed out again",
			"schema":        "table queue_leases is compared: a queue's own tables belong in Rules.Tables",
		}},
		{"storage outlives the scenario", func() queue.Queue { return &sharedCounter{} }, nil, map[string]string{
			"ack-completes": "the acked job was handed out again",
			"fresh-storage": "the first delivery of a fresh scenario is attempt",
			"producer-copy": "the producer's copy is Attempt",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := tt.queue()
			s := &suite{newJob: func(name string, h harness.Handler) harness.Job {
				return harness.Job{Name: name, Handler: h, Queue: q}
			}}
			for _, o := range tt.opts {
				o.apply(s)
			}
			for _, r := range rules {
				if r.name == "check-and-explore" {
					continue // its findings are the harness's, tested with it
				}
				rec := recordtb.New(t)
				rec.Run(func(tb testing.TB) { r.check(tb, s) })
				got := strings.Join(rec.Errors(), "\n")
				if want, broken := tt.want[r.name]; broken {
					assert.Contains(t, got, want, "rule %s", r.name)
				} else {
					assert.Empty(t, got, "rule %s", r.name)
				}
			}
		})
	}
}

// The rules are named as the package documents them.
func TestRulesAreDocumented(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	for _, r := range rules {
		assert.Contains(t, string(doc), fmt.Sprintf("  - %s:", r.name))
	}
}
