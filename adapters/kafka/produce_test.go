package twicekafka

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The broker reads what kgo produces, whatever the batch's compression
// and however many records it holds: each record's topic, key and value.
func TestProducedRecordsUnderEveryCodec(t *testing.T) {
	for name, codec := range map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()} {
		t.Run(name, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "receipts"))
			require.NoError(t, err)
			defer c.Close()
			var mu sync.Mutex
			var got []produced
			c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				recs, err := producedRecords(req.(*kmsg.ProduceRequest), func(id [16]byte) string {
					if ti := c.TopicIDInfo(id); ti != nil {
						return ti.Topic
					}
					return ""
				})
				assert.NoError(t, err)
				mu.Lock()
				got = append(got, recs...)
				mu.Unlock()
				return nil, nil, false
			})
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerBatchCompression(codec), kgo.DefaultProduceTopic("receipts"))
			require.NoError(t, err)
			defer cl.Close()
			var rs []*kgo.Record
			for i := range 3 {
				// Values that compress, so each codec keeps what it made.
				rs = append(rs, &kgo.Record{Key: []byte(fmt.Sprintf("pay-%d", i)), Value: []byte(fmt.Sprintf("%0100d", i))})
			}
			require.NoError(t, cl.ProduceSync(context.Background(), rs...).FirstErr())
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, got, 3)
			for i, r := range got {
				assert.Equal(t, produced{topic: "receipts", key: rs[i].Key, value: rs[i].Value, producerID: rs[i].ProducerID}, r)
			}
		})
	}
}
