package twicenats_test

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	twicenats "github.com/runtwice/twice/adapters/nats"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

// A consumer whose inbox row, keyed by Nats-Msg-Id, commits with its
// write: the stream refuses the producer's copy, and the redelivery after
// a crash before the ack finds the row.
func ExampleJob() {
	job := twicenats.Job("record", twicenats.Spec{
		Stream:   jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}},
		Consumer: jetstream.ConsumerConfig{Durable: "recorder", AckWait: time.Minute},
		Subject:  "events.signup", Data: []byte(`{"user":7}`), MsgID: "signup-7",
	}, func(d *harness.Delivery) jetstream.MessageHandler {
		return func(msg jetstream.Msg) {
			_, err := d.DB.Exec(context.Background(), `INSERT INTO inbox VALUES ($1) ON CONFLICT DO NOTHING`, msg.Headers().Get(jetstream.MsgIDHeader))
			if err != nil {
				_ = msg.Nak()
				return
			}
			_ = msg.Ack()
		}
	})
	res, err := harness.Run(context.Background(), job, harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE inbox (id text PRIMARY KEY)`)},
		Faults: []faults.Fault{faults.ProducerRetry(), faults.CrashBeforeAck()},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = res.DropDatabases(context.Background()) }()
	fmt.Println("idempotent:", res.Idempotent())
	for _, s := range res.Scenarios {
		second := s.Deliveries[1]
		fmt.Printf("%s: attempt %d, not delivered: %q\n", s.Fault, second.Attempt, second.NotDelivered)
	}
	// Output:
	// idempotent: true
	// producer-retry: attempt 1, not delivered: "the queue refused the producer's copy as a duplicate: the stream's duplicate window (2m0s) holds Nats-Msg-Id \"signup-7\" (stream sequence 1)"
	// crash-before-ack: attempt 2, not delivered: ""
}
