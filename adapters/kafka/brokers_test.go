package twicekafka_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	twicekafka "github.com/runtwice/twice/adapters/kafka"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

// With TWICE_KAFKA_BROKERS set, every scenario gets a topic and a group
// of its own on those brokers (here a kfake cluster on TCP, standing in
// for the user's), the verdicts are the in-process cluster's, and the
// finished scenarios' topics are deleted.
func TestUsersBrokers(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	t.Setenv(twicekafka.BrokersEnv, strings.Join(c.ListenAddrs(), ","))

	cfg := seenCfg
	cfg.Faults = []faults.Fault{faults.RunTwice(), faults.CrashBeforeAck(), faults.ConcurrentDelivery()}
	res, err := harness.Run(context.Background(), seenJob(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	for _, s := range res.Scenarios {
		switch s.Fault {
		case faults.NameRunTwice:
			assert.Contains(t, s.Deliveries[1].NotDelivered, "committed offset 1", "%s", s.Schedule)
		default:
			assert.Empty(t, s.Deliveries[1].NotDelivered, "%s", s.Schedule)
		}
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	topics, err := kadm.NewClient(cl).ListTopics(context.Background())
	require.NoError(t, err)
	names := topics.Names()
	require.NotEmpty(t, names)
	for _, n := range names {
		assert.True(t, strings.HasPrefix(n, topic+"-twice-"), "topic %q", n)
	}
	t.Logf("topics left on the brokers after the run (the last scenarios'): %d of %d scenarios and clean runs", len(names), len(res.Scenarios)+2)
}
