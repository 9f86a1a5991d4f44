package pgserver

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkStartLocal measures Start in the local mode up to the first
// answered query: cold (initdb, empty cache) and warm (cached cluster).
// Close is not timed.
func BenchmarkStartLocal(b *testing.B) {
	realRoot := cacheRootDir
	b.Cleanup(func() { cacheRootDir = realRoot })
	parent := filepath.Dir(realRoot())
	if err := os.MkdirAll(parent, 0o700); err != nil {
		b.Fatal(err)
	}

	run := func(b *testing.B, fresh bool) {
		root, err := os.MkdirTemp(parent, "bench-")
		if err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(root)
		cacheRootDir = func() string { return root }
		start := func() time.Duration {
			t0 := time.Now()
			srv, err := Start(context.Background(), Config{Mode: ModeLocal})
			elapsed := time.Since(t0)
			b.StopTimer()
			defer b.StartTimer()
			if err != nil {
				b.Fatal(err)
			}
			if err := srv.Close(); err != nil {
				b.Fatal(err)
			}
			return elapsed
		}
		if !fresh {
			start() // fills the cache
		}
		var total time.Duration
		b.ResetTimer()
		for range b.N {
			if fresh {
				b.StopTimer()
				os.RemoveAll(root)
				b.StartTimer()
			}
			total += start()
		}
		b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/start")
	}
	b.Run("cold", func(b *testing.B) { run(b, true) })
	b.Run("warm", func(b *testing.B) { run(b, false) })
}
