// Package goid reads goroutines' identities from their stacks, the way
// goleak does: the runtime offers no other view of which goroutine runs,
// or of which one started it.
package goid

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
)

// ID is the calling goroutine's id, from its stack's header
// ("goroutine 42 [running]:"); 0 if it cannot be read.
func ID() uint64 {
	var buf [64]byte
	id, _ := Header(buf[:runtime.Stack(buf[:], false)])
	return id
}

// Header reads the id from a stack block's header line.
func Header(block []byte) (uint64, bool) {
	rest, ok := bytes.CutPrefix(block, []byte("goroutine "))
	if !ok {
		return 0, false
	}
	num, _, ok := bytes.Cut(rest, []byte(" "))
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(string(num), 10, 64)
	return id, err == nil
}

// Dump is every goroutine's stack, as runtime.Stack writes it.
func Dump() []byte { return stack(true) }

// scratch holds the buffers runtime.Stack writes into. A dump is taken
// at every handler's return (internal/execute, late.go): allocating its
// room each time, a large object the heap must find and zero, cost about
// as much as the dump itself. Each dump is copied out at its own size.
var scratch = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

func stack(all bool) []byte {
	p := scratch.Get().(*[]byte)
	defer scratch.Put(p)
	for {
		n := runtime.Stack(*p, all)
		if n < len(*p) {
			return bytes.Clone((*p)[:n])
		}
		*p = make([]byte, 2*len(*p))
	}
}

// Creator is the goroutine whose go statement started the calling one,
// from the "created by ... in goroutine N" line of its own stack; 0 for
// the main goroutine or when it cannot be read.
func Creator() uint64 { return creator(stack(false)) }

// creator reads the creator from one goroutine's stack block.
func creator(block []byte) uint64 {
	i := bytes.LastIndex(block, []byte(" in goroutine "))
	if i < 0 || !bytes.Contains(block[:i], []byte("created by ")) {
		return 0
	}
	rest := block[i+len(" in goroutine "):]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	id, _ := strconv.ParseUint(string(rest[:j]), 10, 64)
	return id
}

// Creators reads, from a full dump, the creator of every goroutine in it
// that has one.
func Creators(dump []byte) map[uint64]uint64 {
	out := map[uint64]uint64{}
	for _, block := range bytes.Split(dump, []byte("\n\n")) {
		id, ok := Header(block)
		if !ok {
			continue
		}
		if c := creator(block); c != 0 {
			out[id] = c
		}
	}
	return out
}
