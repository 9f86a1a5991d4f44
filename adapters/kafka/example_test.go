package twicekafka_test

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	twicekafka "github.com/runtwice/twice/adapters/kafka"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

// A consumer that writes a row per record and lets the poll loop commit
// after it: the record comes back after a crash before the commit, and
// is written twice; once committed, Kafka hands it out no more.
func ExampleJob() {
	job := twicekafka.Job("record-payment",
		twicekafka.Record{Topic: "payments", Key: []byte("payment-77"), Value: []byte(`{"cents":1500}`)},
		func(d *harness.Delivery, _ *kgo.Client) twicekafka.Handler {
			return func(ctx context.Context, r *kgo.Record) error {
				_, err := d.DB.Exec(ctx, `INSERT INTO payments (key, body) VALUES ($1, $2)`, string(r.Key), string(r.Value))
				return err
			}
		})
	res, err := harness.Run(context.Background(), job, harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE payments (id bigserial PRIMARY KEY, key text NOT NULL, body text NOT NULL)`)},
		Faults: []faults.Fault{faults.RunTwice(), faults.CrashBeforeAck()},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = res.DropDatabases(context.Background()) }()
	for _, s := range res.Scenarios {
		fmt.Printf("%s: %s\n", s.Fault, s.Verdict)
		if nd := s.Deliveries[1].NotDelivered; nd != "" {
			fmt.Println("  second delivery:", nd)
		}
	}
	// Output:
	// run-twice: idempotent
	//   second delivery: group "twice-record-payment" committed offset 1 of payments[0], past the record's 0: Kafka hands it out no more
	// crash-before-ack: not-idempotent
}
