package twicekafka_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kgo's autocommit, as LoopJob models it: a record a poll handed the loop
// is committed by the first tick after the loop polls again, never while
// the loop still holds it however many ticks pass; a client that leaves
// the group commits on revoke what the tick would then: the record once
// the loop polled again, not while it holds it. Checked with kgo and kfake
// on synctest's clock, so the ticks are kgo's own 5s.
func TestKgoAutocommitCommitsAfterTheNextPoll(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pollAgain bool
		then      func(cl *kgo.Client)
		want      int64
	}{
		{"tick after the next poll", true, func(*kgo.Client) { time.Sleep(6 * time.Second) }, 1},
		{"revoke after the next poll", true, (*kgo.Client).LeaveGroup, 1},
		{"revoke while it holds the record", false, (*kgo.Client).LeaveGroup, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				vn := &kfake.VirtualNetwork{}
				c, err := kfake.NewCluster(kfake.ListenFn(vn.Listen), kfake.NumBrokers(1), kfake.Ports(9092), kfake.SeedTopics(1, topic))
				require.NoError(t, err)
				defer c.Close()
				base := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.Dialer(vn.DialContext)}
				p, err := kgo.NewClient(base...)
				require.NoError(t, err)
				defer p.Close()
				ctx := context.Background()
				require.NoError(t, p.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("a")}).FirstErr())
				// kgo's defaults: autocommit every 5s of polled records.
				cl, err := kgo.NewClient(append(base, kgo.ConsumerGroup("g"), kgo.ConsumeTopics(topic),
					kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
				require.NoError(t, err)
				defer cl.Close()
				adm := kadm.NewClient(p)
				committed := func() int64 {
					t.Helper()
					os, err := adm.FetchOffsets(ctx, "g")
					require.NoError(t, err)
					if o, ok := os.Lookup(topic, 0); ok {
						return o.At
					}
					return -1
				}

				fs := cl.PollFetches(ctx)
				require.NoError(t, fs.Err())
				require.Len(t, fs.Records(), 1)
				// Six ticks while the loop handles it, and off the tick: at
				// 30s the sixth tick and the poll below would fall on one
				// instant of synctest's clock, run in either order, and the
				// tick would then commit what that poll let go (CI saw it).
				time.Sleep(32 * time.Second)
				assert.Equal(t, int64(-1), committed(), "not committed while the loop still holds the record")
				if tc.pollAgain {
					pctx, cancel := context.WithTimeout(ctx, time.Second)
					cl.PollFetches(pctx) // the loop is done with it: nothing more comes
					cancel()
					assert.Equal(t, int64(-1), committed(), "the poll itself commits nothing: the tick or the revoke does")
				}
				tc.then(cl)
				assert.Equal(t, tc.want, committed())
			})
		})
	}
}
