package goid

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
)

// TestDumpHoldsEveryGoroutine checks a dump larger than the scratch
// buffer's first size (it must grow, not cut the dump short) and that
// each dump is the caller's own copy, not the pooled buffer.
func TestDumpHoldsEveryGoroutine(t *testing.T) {
	const n = 1000 // about 100 bytes a stack: well past 64 KiB
	release := make(chan struct{})
	var started sync.WaitGroup
	ids := make(chan uint64, n)
	for range n {
		started.Add(1)
		go func() {
			ids <- ID()
			started.Done()
			<-release
		}()
	}
	started.Wait()
	defer close(release)

	first := Dump()
	if len(first) <= 64<<10 {
		t.Fatalf("dump of %d goroutines is %d bytes, want more than 64 KiB for the test to mean anything", n, len(first))
	}
	close(ids)
	for id := range ids {
		if !bytes.Contains(first, fmt.Appendf(nil, "goroutine %d [", id)) {
			t.Fatalf("dump misses goroutine %d", id)
		}
	}
	me := fmt.Appendf(nil, "goroutine %d [running]", ID())
	if !bytes.HasPrefix(first, me) {
		t.Fatalf("dump starts %q, want the caller's own stack (%q) first", first[:min(len(first), 40)], me)
	}

	// The caller owns its dump: later ones must not write into it. The
	// scratch buffers come from a sync.Pool, which may hand out a new
	// one, so this looks several times.
	for range 5 {
		clear(first)
		next := Dump()
		if !bytes.HasPrefix(next, me) {
			t.Fatalf("next dump starts %q, want %q", next[:min(len(next), 40)], me)
		}
		if !bytes.Equal(first, make([]byte, len(first))) {
			t.Fatal("a dump changed after the next one was taken")
		}
		first = next
	}
}
