package main

import (
	"fmt"
	"github.com/runtwice/twice/internal/text"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progress shows how far go test is: on a terminal one line redrawn in
// place (packages done/total, jobs checked, elapsed, what runs now);
// otherwise one plain line per finished package, for CI logs.
type progress struct {
	out io.Writer
	tty bool

	mu       sync.Mutex
	begin    time.Time
	total    int
	done     int
	recDir   string
	jobs     int
	running  map[string]bool
	stopTick chan struct{}
	ticked   sync.WaitGroup
}

func newProgress(out io.Writer) *progress {
	return &progress{out: out, tty: isTerminal(out), running: map[string]bool{}}
}

// isTerminal reports whether w is a character device (a terminal), and
// not a dumb one.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (p *progress) start(total int, recDir string) {
	p.mu.Lock()
	p.begin, p.total, p.recDir = time.Now(), total, recDir
	p.mu.Unlock()
	if !p.tty {
		_, _ = fmt.Fprintf(p.out, "[twice] running the checks of %d %s\n", total, text.Plural(total, "package"))
		return
	}
	p.stopTick = make(chan struct{})
	p.ticked.Add(1)
	go func() {
		defer p.ticked.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stopTick:
				return
			case <-t.C:
				p.mu.Lock()
				p.countJobs()
				p.redraw()
				p.mu.Unlock()
			}
		}
	}()
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
	if e.Package == "" || e.Test != "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e.Action {
	case "start":
		p.running[e.Package] = true
	case "pass", "fail", "skip":
		delete(p.running, e.Package)
		p.done++
		if !p.tty {
			p.countJobs()
			word := map[string]string{"pass": "ok  ", "fail": "FAIL", "skip": "skip"}[e.Action]
			_, _ = fmt.Fprintf(p.out, "[twice] %s %s (%d/%d packages, %d jobs checked, %s)\n",
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
	line := fmt.Sprintf("[twice] %d/%d packages · %d jobs checked · %s", p.done, p.total, p.jobs, elapsed(time.Since(p.begin)))
	if len(now) == 1 {
		line += " · " + now[0]
	} else if len(now) > 1 {
		line += fmt.Sprintf(" · %d packages running", len(now))
	}
	_, _ = fmt.Fprintf(p.out, "\r\033[K%s", line)
}

func (p *progress) stop() {
	if !p.tty {
		return
	}
	close(p.stopTick)
	p.ticked.Wait()
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
