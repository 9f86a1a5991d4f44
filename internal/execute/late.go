package execute

import (
	"bytes"
	"context"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/goid"
	"github.com/runtwice/twice/internal/text"
	"github.com/runtwice/twice/internal/wireproxy"
)

// Work after the ack. A queue acks a delivery when its handler returns;
// a goroutine the handler started that writes or sends after that does
// its work unacked: a crash then loses it, and nothing redelivers the job.
// So a delivery's connections and effect clients stay watched after its
// handler returns, for as long as goroutines its handler started from the
// user's code still run (bounded by lateWait), and every statement or
// effect call it makes then is recorded (DeliveryOutcome.AfterReturn) and
// made, as production makes it.

// lateWait bounds how long after its handler returned a delivery stays
// watched for the goroutines its handler started. A goroutine still
// running then is reported (result.GoroutineOutlived): what it does later
// is not checked.
const lateWait = 5 * time.Second

// lateWatch is a delivery's watch after its handler returned. Its asks
// come from the handler's goroutines and the proxy's, so it has a lock.
type lateWatch struct {
	mu     sync.Mutex
	closed bool      // the harness stopped watching: later calls are refused
	work   []string  // statements and effect calls made after the return
	gs     []uint64  // the goroutines the handler left running
	at     time.Time // when the handler returned
}

// ask records what, a statement or effect call made after the handler
// returned, and lets it through, or refuses it once the watch is over.
func (w *lateWatch) ask(what string) wireproxy.Action {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return wireproxy.Crash
	}
	w.work = append(w.work, text.OneLine(what))
	return wireproxy.Forward
}

// close ends the watch; it returns what was made after the return.
func (w *lateWatch) close() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	return w.work
}

// left notes the goroutines the handler left running when it returned,
// at at.
func (w *lateWatch) left(gs []uint64, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gs, w.at = gs, at
}

// running reports whether the handler left goroutines running.
func (w *lateWatch) running() bool {
	gs, _ := w.goroutines()
	return len(gs) > 0
}

// goroutines are the goroutines the handler left running, and when it
// returned.
func (w *lateWatch) goroutines() ([]uint64, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gs, w.at
}

// awaitLate waits, once every delivery has ended, for the goroutines the
// returned deliveries' handlers left running (at most lateWait after the
// return), then closes those deliveries' connections, which stop closed
// for them. Whatever each delivery made after its return is its
// outcome's AfterReturn.
func (e *execution) awaitLate(ctx context.Context) {
	for _, d := range e.deliveries {
		if d.closeLate {
			gs, at := d.late.goroutines()
			if !waitGone(ctx, gs, at.Add(lateWait)) {
				e.r.outlived.add(result.GoroutineOutlived, d.spec, e.sched, len(gs))
			}
			d.outcome.AfterReturn = d.late.close()
			d.closeLate = false
			e.world.close(d)
			continue
		}
		d.outcome.AfterReturn = d.late.close()
	}
}

// waitGone waits until none of the goroutines gs runs, until deadline or
// until ctx ends; it reports whether they all ended.
func waitGone(ctx context.Context, gs []uint64, deadline time.Time) bool {
	poll := time.Millisecond
	for {
		if !anyRunning(gs) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(poll):
		}
		poll = min(2*poll, 50*time.Millisecond)
	}
}

// goroutine is one entry of a full stack dump.
type goroutine struct {
	id, parent uint64 // parent: the goroutine whose go statement started it
	user       bool   // a function of the user's code is on its stack, or started it
	// fresh: it has not run yet (runnable, one frame), so its stack
	// does not show whose code it will run (sync.WaitGroup.Go's wrapper)
	fresh bool
}

// watched reports whether the harness waits for g: it runs the user's
// code, or may.
func (g goroutine) watched() bool { return g.user || g.fresh }

// leftBy lists the goroutines still running that root started, directly
// or through ones it started, that run the user's code (startedBy).
func leftBy(root uint64) []uint64 { return startedBy(root, family(goid.Dump(), root, userCode)) }

// family reads from dump the goroutines root started, directly or
// through ones still running, judging their functions with user. Only
// their stacks are parsed: a dump holds hundreds of others (the proxies',
// the pools'), found by the "created by ... in goroutine N" lines alone.
func family(dump []byte, root uint64, user func(fn string) bool) []goroutine {
	in := map[uint64]bool{root: true}
	var blocks [][]byte
	for grew := true; grew; {
		grew = false
		for rest, at := dump, 0; ; {
			i := bytes.Index(rest, []byte(" in goroutine "))
			if i < 0 {
				break
			}
			end := i + len(" in goroutine ")
			j := end
			for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
				j++
			}
			parent, _ := strconv.ParseUint(string(rest[end:j]), 10, 64)
			if in[parent] {
				from := 0 // the block's start: the dump's, or after the blank line before it
				if k := bytes.LastIndex(dump[:at+i], []byte("\n\n")); k >= 0 {
					from = k + 2
				}
				to := bytes.Index(dump[at+j:], []byte("\n\n"))
				if to < 0 {
					to = len(dump) - at - j
				}
				block := dump[from : at+j+to]
				if id, ok := goid.Header(block); ok && !in[id] {
					in[id], grew = true, true
					blocks = append(blocks, block)
				}
			}
			rest, at = rest[j:], at+j
		}
	}
	return parseGoroutines(bytes.Join(blocks, []byte("\n\n")), user)
}

// parseGoroutines reads a stack dump, judging its functions with user.
func parseGoroutines(dump []byte, user func(fn string) bool) []goroutine {
	var out []goroutine
	for _, block := range bytes.Split(dump, []byte("\n\n")) {
		id, ok := goid.Header(block)
		if !ok {
			continue
		}
		g := goroutine{id: id}
		lines := strings.Split(string(block), "\n")
		frames := 0
		for _, line := range lines[1:] {
			if line == "" || line[0] == '\t' {
				continue // a frame's file and line
			}
			fn, ok := strings.CutPrefix(line, "created by ")
			if ok {
				var parent string
				fn, parent, _ = strings.Cut(fn, " in goroutine ")
				g.parent, _ = strconv.ParseUint(parent, 10, 64)
			} else if i := strings.LastIndex(line, "("); i > 0 {
				fn, frames = line[:i], frames+1 // "pkg.(*T).M(0x1, ...)"
			}
			g.user = g.user || user(fn)
		}
		g.fresh = frames == 1 && strings.Contains(lines[0], "[runnable]")
		out = append(out, g)
	}
	return out
}

// startedBy lists the goroutines still running that the goroutine root
// started, or that they started in turn, that run the user's code
// (userCode), whether its go statement started them or a library's
// (sync.WaitGroup.Go, errgroup): the ones a library starts for itself (an
// HTTP transport's connection reader, a pool's health check) are not the
// job's work.
func startedBy(root uint64, all []goroutine) []uint64 {
	family := map[uint64]bool{root: true}
	for grew := true; grew; {
		grew = false
		for _, g := range all {
			if !family[g.id] && family[g.parent] {
				family[g.id], grew = true, true
			}
		}
	}
	var out []uint64
	for _, g := range all {
		if g.id != root && family[g.id] && g.watched() {
			out = append(out, g.id)
		}
	}
	return out
}

func anyRunning(gs []uint64) bool {
	if len(gs) == 0 {
		return false
	}
	want := map[uint64]bool{}
	for _, g := range gs {
		want[g] = true
	}
	dump := append([]byte("\n"), goid.Dump()...) // every header follows a newline
	for _, g := range gs {
		i := bytes.Index(dump, fmt.Appendf(nil, "\ngoroutine %d [", g))
		if i < 0 {
			continue
		}
		i++
		end := bytes.Index(dump[i:], []byte("\n\n"))
		if end < 0 {
			end = len(dump) - i
		}
		for _, p := range parseGoroutines(dump[i:i+end], userCode) {
			if want[p.id] && p.watched() {
				return true // one that was fresh and now runs a library's code only is not waited for
			}
		}
	}
	return false
}

// ownModule is twice's module: its library packages start goroutines of
// their own (a delivery's connection), which are not the user's.
const ownModule = "github.com/runtwice/twice"

// mainModule is the module of the binary: the package under test's, in
// a go test binary.
var mainModule = sync.OnceValue(func() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.Main.Path
	}
	return ""
})

// userCode reports whether fn ("example.com/jobs.(*Worker).Handle.func1")
// is the user's code: in the binary's main module, or any code outside
// the standard library when the main module is unknown, and not one of
// twice's library packages (its tests and examples are user code).
func userCode(fn string) bool {
	pkg := funcPackage(fn)
	first, _, _ := strings.Cut(pkg, "/")
	if pkg == "" || (!strings.Contains(first, ".") && pkg != "main") {
		return false // the standard library
	}
	if pkg == ownModule || strings.HasPrefix(pkg, ownModule+"/") {
		return strings.HasSuffix(pkg, "_test") || strings.Contains(pkg, "/examples/")
	}
	m := mainModule()
	if m == "" || m == "command-line-arguments" || pkg == "main" {
		return true
	}
	return pkg == m || strings.HasPrefix(pkg, m+"/")
}

// funcPackage is the package path of a function's name as a stack shows
// it: "example.com/jobs.(*W).Handle.func1" is "example.com/jobs".
func funcPackage(fn string) string {
	slash := strings.LastIndex(fn, "/")
	dot := strings.Index(fn[slash+1:], ".")
	if dot < 0 {
		return ""
	}
	return fn[:slash+1+dot]
}
