package twiceasynq

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
)

// asynq v0.26.0's context accessors answer from the delivery: the
// linkname and the mirrored message layout still match asynq.
func TestContextValuesRoundTrip(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "outer"))
	ctx := withTask(parent, &asynq.TaskInfo{ID: "task-7", Queue: "critical", Type: "reward:order", MaxRetry: 9, Retried: 3})
	if id, ok := asynq.GetTaskID(ctx); !ok || id != "task-7" {
		t.Errorf("GetTaskID = %q, %v, want task-7, true", id, ok)
	}
	if n, ok := asynq.GetRetryCount(ctx); !ok || n != 3 {
		t.Errorf("GetRetryCount = %d, %v, want 3, true", n, ok)
	}
	if n, ok := asynq.GetMaxRetry(ctx); !ok || n != 9 {
		t.Errorf("GetMaxRetry = %d, %v, want 9, true", n, ok)
	}
	if q, ok := asynq.GetQueueName(ctx); !ok || q != "critical" {
		t.Errorf("GetQueueName = %q, %v, want critical, true", q, ok)
	}
	if v := ctx.Value(key{}); v != "outer" {
		t.Errorf("the harness's own context value = %v, want outer", v)
	}
	if _, ok := ctx.Deadline(); ok {
		t.Errorf("ctx has a deadline; the harness clock, not the wall clock, cancels it")
	}
	if ctx.Err() != nil {
		t.Fatalf("ctx.Err() = %v before the harness cancelled it", ctx.Err())
	}
	cancel()
	if ctx.Err() != context.Canceled {
		t.Errorf("ctx.Err() = %v after the harness cancelled it, want context.Canceled", ctx.Err())
	}
	if _, ok := asynq.GetTaskID(context.Background()); ok {
		t.Errorf("GetTaskID found a task ID in a bare context")
	}
}

// The options of asynq.NewTask count, before the enqueue options.
func TestTaskOptionsAreRead(t *testing.T) {
	opts, err := taskOptions(asynq.NewTask("reward:order", nil, asynq.TaskID("order-9812"), asynq.MaxRetry(3)))
	if err != nil {
		t.Fatal(err)
	}
	if len(opts) != 2 || opts[0].String() != `TaskID("order-9812")` || opts[1].String() != "MaxRetry(3)" {
		t.Errorf("taskOptions = %v, want [TaskID(\"order-9812\") MaxRetry(3)]", opts)
	}
	m, err := compose("reward", asynq.NewTask("reward:order", nil, asynq.MaxRetry(3)), []asynq.Option{asynq.MaxRetry(5), asynq.Queue("critical")})
	if err != nil {
		t.Fatal(err)
	}
	if m.maxRetry != 5 || m.queue != "critical" || m.timeout != defaultTimeout {
		t.Errorf("compose = %+v, want MaxRetry 5 (the enqueue option wins), queue critical, timeout 30m", m)
	}
}

// The linkname and the mirrored message layout are asynq v0.26.0's: the
// module must require that version.
func TestAsynqVersionIsPinned(t *testing.T) {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mod), "github.com/hibiken/asynq v0.26.0\n") {
		t.Fatalf("go.mod does not require asynq v0.26.0; twiceasynq's context and options model that version: check internal/context.New and base.TaskMessage, then update the mirror and this test")
	}
}
