package twicewatermill_test

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/components/cqrs"

	twicewatermill "github.com/runtwice/twice/adapters/watermill"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

// PointsEarned is the event the example's handler consumes.
type PointsEarned struct {
	AccountID int64 `json:"account_id"`
	Points    int   `json:"points"`
}

// A production cqrs.EventHandler, built once per worker process on the
// worker's pool, with the service's processor config: Watermill's
// EventProcessor runs it. Adding the points without remembering the event
// awards them twice when the process dies before the ack.
func ExampleEventJob() {
	config := cqrs.EventProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.EventProcessorGenerateSubscribeTopicParams) (string, error) {
			return "events." + p.EventName, nil
		},
		Marshaler: cqrs.JSONMarshaler{GenerateName: cqrs.StructName},
	}
	job := twicewatermill.EventJob("points-earned", PointsEarned{AccountID: 7, Points: 50}, config,
		func(w *twicewatermill.Worker) cqrs.EventHandler {
			return cqrs.NewEventHandler("AddPoints", func(ctx context.Context, ev *PointsEarned) error {
				_, err := w.DB.Exec(ctx, `UPDATE accounts SET points = points + $2 WHERE id = $1`, ev.AccountID, ev.Points)
				return err
			})
		})
	res, err := harness.Run(context.Background(), job, harness.Config{
		Setup:  accounts.Setup,
		Faults: []faults.Fault{faults.CrashBeforeAck()},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = res.DropDatabases(context.Background()) }()
	for _, s := range res.Scenarios {
		fmt.Printf("%s (%s): %s\n", s.Fault, s.Schedule, s.Verdict)
	}
	// Output:
	// crash-before-ack (j1a1w1!crash > +30s j1a2w2): not-idempotent
}
