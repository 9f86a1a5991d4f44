package rewards_test

import (
	"testing"

	"github.com/hibiken/asynq"

	twiceasynq "github.com/runtwice/twice/adapters/asynq"
	"github.com/runtwice/twice/adapters/asynq/example/rewards"
	"github.com/runtwice/twice/harness"
)

// The check a team would write: the reward handler as deployed, under the
// default matrix. The checkout enqueues the reward with a TaskID derived
// from the order, so a producer's second copy is refused by asynq, and
// the handler's processed-tasks row makes every redelivery of the task a
// no-op: idempotent.
func TestRewardHandler(t *testing.T) {
	harness.Check(t, twiceasynq.Job("reward-order", rewards.NewRewardTask(9812, asynq.TaskID("reward-order-9812")),
		func(d *harness.Delivery) asynq.Handler { return &rewards.RewardHandler{Pool: d.DB} }),
		harness.Config{Setup: []harness.Setup{harness.SQL(rewards.Schema)}})
}
