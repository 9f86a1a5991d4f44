package main

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/text"
)

// progress shows how far go test is, from its first second: while go
// builds, how many packages it compiled (of the most it may have to: the
// dependencies of the tests, less what its build cache holds) and how many
// test binaries it linked, read from go test -x; then, on a terminal, one
// line redrawn in place (packages done/total, jobs checked, elapsed, what
// runs now); otherwise one plain line per finished package, and one every
// 10 s while go builds (until the first test binary runs, and after it
// whenever go built more), for CI logs.
type progress struct {
	out io.Writer
	tty bool

	mu       sync.Mutex
	begin    time.Time
	total    int
	deps     int
	done     int
	recDir   string
	jobs     int
	compiled int
	linked   int
	started  bool // a test binary has started
	running  map[string]bool
	stopTick chan struct{}
	ticked   sync.WaitGroup
}

// plainEvery is how often, away from a terminal, twice says that go is
// still building.
const plainEvery = 10 * time.Second

func newProgress(out io.Writer) *progress {
	return &progress{out: out, tty: isTerminal(out), running: map[string]bool{}}
}

// isTerminal reports whether w is a character device (a terminal), and
// not a dumb one; through the writers that wrap it (a Scrubber's).
func isTerminal(w io.Writer) bool {
	for {
		u, ok := w.(interface{ Unwrap() io.Writer })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// announce is twice's first line: what it was asked to report on, and
// what comes first.
func (p *progress) announce(patterns []string) {
	say(p.out, "report on %s: go list names the packages, then go test builds and runs their tests", strings.Join(patterns, " "))
}

func (p *progress) start(total, deps int, recDir string) {
	p.mu.Lock()
	p.begin, p.total, p.deps, p.recDir = time.Now(), total, deps, recDir
	p.mu.Unlock()
	say(p.out, "building the tests of %d %s, then running their checks: go test compiles what its build cache lacks (up to %d packages; minutes when the cache is empty)",
		total, text.Plural(total, "package"), deps)
	p.stopTick = make(chan struct{})
	p.ticked.Add(1)
	go func() {
		defer p.ticked.Done()
		every := 250 * time.Millisecond
		if !p.tty {
			every = plainEvery
		}
		t := time.NewTicker(every)
		defer t.Stop()
		var last [2]int // the build's counts at the last plain line
		for {
			select {
			case <-p.stopTick:
				return
			case <-t.C:
				p.mu.Lock()
				switch {
				case p.tty:
					p.countJobs()
					p.redraw()
				case !p.started || last != [2]int{p.compiled, p.linked}:
					// Before the first test binary runs, and for as long
					// as go goes on building the others.
					say(p.out, "building: %s (%s)", p.buildCounts(), elapsed(time.Since(p.begin)))
				}
				last = [2]int{p.compiled, p.linked}
				p.mu.Unlock()
			}
		}
	}()
}

// buildCounts is how far go's build is: "12 of up to 456 packages
// compiled, 1 test binary linked".
func (p *progress) buildCounts() string {
	s := fmt.Sprintf("%d of up to %d packages compiled", p.compiled, p.deps)
	if p.linked > 0 {
		binaries := "binaries"
		if p.linked == 1 {
			binaries = "binary"
		}
		s += fmt.Sprintf(", %d test %s linked", p.linked, binaries)
	}
	return s
}

// buildStep counts one compile or link go test -x says it runs.
func (p *progress) buildStep(link bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if link {
		p.linked++
	} else {
		p.compiled++
	}
}

// countJobs counts the records the harness has written: jobs checked.
func (p *progress) countJobs() {
	entries, err := os.ReadDir(p.recDir)
	if err != nil {
		return
	}
	n := 0
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			n++
		}
	}
	p.jobs = n
}

func (p *progress) event(e testEvent) {
	if e.Action == "build-output" {
		switch {
		case compileStep.MatchString(e.Output):
			p.buildStep(false)
		case linkStep.MatchString(e.Output):
			p.buildStep(true)
		}
		return
	}
	if e.Package == "" || e.Test != "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e.Action {
	case "start":
		p.running[e.Package] = true
		if !p.started {
			p.started = true
			if !p.tty {
				say(p.out, "the first test binary runs after %s (%s)", elapsed(time.Since(p.begin)), p.buildCounts())
			}
		}
	case "pass", "fail", "skip":
		delete(p.running, e.Package)
		p.done++
		if !p.tty {
			p.countJobs()
			word := map[string]string{"pass": "ok  ", "fail": "FAIL", "skip": "skip"}[e.Action]
			say(p.out, "%s %s (%d/%d packages, %d jobs checked, %s)",
				word, e.Package, p.done, p.total, p.jobs, elapsed(time.Since(p.begin)))
			return
		}
		p.redraw()
	}
}

func (p *progress) redraw() {
	var now []string
	for pkg := range p.running {
		now = append(now, pkg)
	}
	line := blame.Line("%d/%d packages · %d jobs checked · %s", p.done, p.total, p.jobs, elapsed(time.Since(p.begin)))
	if !p.started || p.linked < p.total {
		line += " · building: " + p.buildCounts()
	}
	if len(now) == 1 {
		line += " · " + now[0]
	} else if len(now) > 1 {
		line += fmt.Sprintf(" · %d packages running", len(now))
	}
	_, _ = fmt.Fprintf(p.out, "\r\033[K%s", line)
}

func (p *progress) stop() {
	close(p.stopTick)
	p.ticked.Wait()
	if !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.countJobs()
	p.redraw()
	_, _ = fmt.Fprintln(p.out)
}

func elapsed(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}

// go test -x traces every command of its build, and with -json the
// trace comes as build-output events like the compiler's errors: progress
// counts the compiles and links, and isTrace keeps the trace out of a
// package's build output.
var (
	compileStep = regexp.MustCompile(`(?m)^\S*/compile(\.exe)? .*-p \S+`)
	linkStep    = regexp.MustCompile(`(?m)^(GOROOT='[^']*' )?\S*/link(\.exe)? -o \S+`)
	traceStart  = regexp.MustCompile(`^(WORK=|mkdir |cat |cd |mv |rm |cp |echo |touch |ln |GOROOT=|TERM=|CGO_|gcc |clang |\$WORK|/\S*/pkg/tool/)`)
)

// isTrace reports whether one build-output event is go's -x trace of a
// command rather than what a command printed.
func isTrace(output string) bool { return traceStart.MatchString(output) }
