package twiceasynq

import (
	"context"
	"time"
	_ "unsafe" // for go:linkname: asynq builds its task context in an internal package

	"github.com/hibiken/asynq"
)

// taskMessage mirrors the fields of asynq v0.26.0's internal
// base.TaskMessage, in order, so that asynq's own context constructor can
// read it. asynq keeps the context key and its value type internal, and
// GetTaskID, GetRetryCount, GetMaxRetry and GetQueueName read only what
// that constructor stores, so the handler's context is built by asynq's
// code rather than by a copy of it. go.mod pins v0.26.0, and
// TestContextValuesRoundTrip fails if a new asynq changes the layout.
type taskMessage struct {
	Type         string
	Payload      []byte
	Headers      map[string]string
	ID           string
	Queue        string
	Retry        int
	Retried      int
	ErrorMsg     string
	LastFailedAt int64
	Timeout      int64
	Deadline     int64
	UniqueKey    string
	GroupKey     string
	Retention    int64
	CompletedAt  int64
}

// newAsynqContext is asynq's internal/context.New, which its processor
// calls for every task it hands to a handler.
//
//go:linkname newAsynqContext github.com/hibiken/asynq/internal/context.New
func newAsynqContext(base context.Context, msg *taskMessage, deadline time.Time) (context.Context, context.CancelFunc)

// keep the package that defines newAsynqContext linked in.
var _ = asynq.GetTaskID

// withTask returns ctx carrying the task's metadata as asynq's processor
// puts it there. asynq's own deadline is wall-clock time, which the
// harness clock does not follow, so it is not set: the queue cancels ctx
// instead (queue.Rules.CancelAfter), and ctx.Deadline reports none.
func withTask(ctx context.Context, info *asynq.TaskInfo) context.Context {
	msg := &taskMessage{Type: info.Type, Payload: info.Payload, Headers: info.Headers, ID: info.ID,
		Queue: info.Queue, Retry: info.MaxRetry, Retried: info.Retried}
	meta, cancel := newAsynqContext(context.Background(), msg, time.Now().Add(time.Hour))
	cancel()
	return taskContext{Context: ctx, meta: context.WithoutCancel(meta)}
}

// taskContext is ctx, with the values of meta first.
type taskContext struct {
	context.Context
	meta context.Context
}

func (c taskContext) Value(key any) any {
	if v := c.meta.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}
