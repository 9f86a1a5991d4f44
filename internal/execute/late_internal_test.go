package execute

import (
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/runtwice/twice/internal/goid"
)

// The goroutines a handler leaves running are found by their family and
// their code: one running the user's code, started directly or through
// sync.WaitGroup.Go, is, and so is one that has not run yet; one running
// a library's code only is not.
func TestStartedBy(t *testing.T) {
	type ids struct{ root, direct, viaGo, library uint64 }
	var got ids
	release := make(chan struct{})
	dumped := make(chan []byte)
	go func() { // the handler's goroutine
		got.root = goid.ID()
		ch := make(chan uint64)
		go func() { ch <- goid.ID(); <-release }()
		got.direct = <-ch
		var wg sync.WaitGroup
		wg.Go(func() { ch <- goid.ID(); <-release })
		got.viaGo = <-ch
		startLibrary(ch, release)
		got.library = <-ch
		dumped <- dump()
	}()
	user := func(fn string) bool { return strings.Contains(fn, "TestStartedBy") }
	fam := family(<-dumped, got.root, user)
	assert.ElementsMatch(t, []uint64{got.direct, got.viaGo}, startedBy(got.root, fam))
	assert.Len(t, fam, 3, "the library's goroutine is of the family, but not waited for")
	close(release)
}

// startLibrary stands for a library that starts a goroutine for itself.
func startLibrary(ch chan<- uint64, release <-chan struct{}) { go libraryLoop(ch, release) }

func libraryLoop(ch chan<- uint64, release <-chan struct{}) { ch <- goid.ID(); <-release }

func dump() []byte {
	buf := make([]byte, 1<<20)
	return buf[:runtime.Stack(buf, true)]
}

func TestParseFreshGoroutine(t *testing.T) {
	const d = "goroutine 9 [runnable]:\nsync.(*WaitGroup).Go.func1()\n\t/usr/local/go/src/sync/waitgroup.go:238\ncreated by sync.(*WaitGroup).Go in goroutine 8\n\t/usr/local/go/src/sync/waitgroup.go:238 +0x73\n\n" +
		"goroutine 8 [running]:\nexample.com/jobs.Handle(0x1?)\n\t/x.go:18 +0xc6\ncreated by testing.(*T).Run in goroutine 1\n\t/t.go:1"
	user := func(fn string) bool { return strings.HasPrefix(fn, "example.com/") }
	assert.Equal(t, []goroutine{{id: 9, parent: 8, fresh: true}, {id: 8, parent: 1, user: true}}, parseGoroutines([]byte(d), user))
	assert.Equal(t, []uint64{9}, startedBy(8, family([]byte(d), 8, user)))
}

func TestUserCode(t *testing.T) {
	for fn, want := range map[string]bool{
		"net/http.(*persistConn).readLoop":                       false,
		"sync.(*WaitGroup).Go.func1":                             false,
		"github.com/jackc/pgx/v5/pgxpool.NewWithConfig.func3":    false,
		"github.com/runtwice/twice/internal/wireproxy.(*P).Dial": false,
		"github.com/runtwice/twice/harness_test.TestX.func1.1":   true,
		"github.com/runtwice/twice/examples/billing.Charge":      true,
		"main.main.func1": true,
	} {
		assert.Equal(t, want, userCode(fn), fn)
	}
}
