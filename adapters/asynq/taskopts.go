package twiceasynq

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/hibiken/asynq"
)

// taskOptions reads the options a task was made with (asynq.NewTask's
// opts), which asynq's client merges before the enqueue options but keeps
// in an unexported field. TestTaskOptionsAreRead fails if a new asynq
// moves them.
func taskOptions(task *asynq.Task) ([]asynq.Option, error) {
	f := reflect.ValueOf(task).Elem().FieldByName("opts")
	if !f.IsValid() || f.Type() != reflect.TypeFor[[]asynq.Option]() {
		return nil, fmt.Errorf("asynq.Task has no field opts []asynq.Option: twiceasynq models asynq v0.26.0")
	}
	return *(*[]asynq.Option)(unsafe.Pointer(f.UnsafeAddr())), nil
}
