package readerledger_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	twicekafka "github.com/runtwice/twice/adapters/kafka"
	"github.com/runtwice/twice/adapters/kafka/example/readerledger"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

var record = twicekafka.Record{Topic: readerledger.Topic, Key: []byte("pay-1"), Value: []byte(`{"payment_id":"pay-1","account":7,"amount":50}`)}

// cfg bounds each delivery by 5s: a loop evicted while it handles its
// message can wait in kafka-go's CommitMessages until its context ends
// (see ReaderJob), and its verdict does not need the default 30s.
var cfg = harness.Config{Setup: []harness.Setup{harness.SQL(readerledger.Schema)}, DeliveryTimeout: 5 * time.Second}

func readerJob(name string, loop func(readerledger.Consumer) twicekafka.ReaderLoop) harness.Job {
	return twicekafka.ReaderJob(name, record, readerledger.Config(), func(d *harness.Delivery) twicekafka.ReaderLoop {
		return loop(readerledger.Consumer{DB: d.DB})
	})
}

func run(t *testing.T, job harness.Job, c harness.Config) *harness.Result {
	t.Helper()
	res, err := harness.Run(context.Background(), job, c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	return res
}

// failing is the faults with a scenario that is not idempotent.
func failing(res *harness.Result) []faults.Name {
	var out []faults.Name
	for _, sc := range res.Failed() {
		if !slices.Contains(out, sc.Fault) {
			out = append(out, sc.Fault)
		}
	}
	slices.Sort(out)
	return out
}

// Each kafka-go loop is checked from its own code under the default
// matrix.
func TestReaderLoops(t *testing.T) {
	t.Run("read then credit", func(t *testing.T) {
		res := run(t, readerJob("read-then-credit", func(c readerledger.Consumer) twicekafka.ReaderLoop { return c.ReadThenCredit }), cfg)
		t.Logf("faults with a finding: %v", failing(res))
		assert.Contains(t, failing(res), faults.NameCrashMidJob, "ReadMessage commits before the credit: a crash between them loses the payment: %s", res)
	})
	t.Run("inbox then commit", func(t *testing.T) {
		res := run(t, readerJob("inbox-then-commit", func(c readerledger.Consumer) twicekafka.ReaderLoop { return c.InboxThenCommit }), cfg)
		assert.True(t, res.Idempotent(), "%s", res)
	})
}
