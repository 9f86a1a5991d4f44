package main

import (
	"bufio"
	"encoding/json"
	"io"
	"sort"
	"strings"
	"time"
)

// testEvent is one line of go test -json (cmd/test2json), with the build
// events go test -json writes since Go 1.24.
type testEvent struct {
	Time        time.Time
	Action      string
	Package     string
	Test        string
	Output      string
	Elapsed     float64
	ImportPath  string // build-output, build-fail
	FailedBuild string
}

// maxOutput bounds the output kept per test and per package: the end is
// what explains a failure.
const maxOutput = 64 << 10

// tail is output that keeps its last maxOutput bytes.
type tail struct{ b []byte }

func (t *tail) write(s string) {
	t.b = append(t.b, s...)
	if len(t.b) > maxOutput {
		t.b = append([]byte(nil), t.b[len(t.b)-maxOutput:]...)
	}
}

func (t *tail) String() string { return string(t.b) }

// lastLines returns the last n lines of t.
func (t *tail) lastLines(n int) string {
	lines := strings.Split(strings.TrimRight(t.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// testRun is what go test said about one test.
type testRun struct {
	name   string
	ran    bool
	result string // pass, fail, skip, or empty when it never ended
	output tail
}

// packageRun is what go test said about one package.
type packageRun struct {
	importPath  string
	started     bool
	result      string // pass, fail, skip, or empty while running
	elapsed     time.Duration
	failedBuild bool
	buildOutput tail
	output      tail // output outside any test
	tests       map[string]*testRun
	order       []string
}

func (p *packageRun) test(name string) *testRun {
	t, ok := p.tests[name]
	if !ok {
		t = &testRun{name: name}
		p.tests[name] = t
		p.order = append(p.order, name)
	}
	return t
}

// testRuns collects the events of one go test -json run.
type testRuns struct {
	packages map[string]*packageRun
	builds   map[string]*tail // build output by import path
	stray    tail             // lines that were not events
}

func newTestRuns() *testRuns {
	return &testRuns{packages: map[string]*packageRun{}, builds: map[string]*tail{}}
}

func (r *testRuns) pkg(path string) *packageRun {
	p, ok := r.packages[path]
	if !ok {
		p = &packageRun{importPath: path, tests: map[string]*testRun{}}
		r.packages[path] = p
	}
	return p
}

// read consumes go test -json output, calling onEvent after each event.
func (r *testRuns) read(in io.Reader, onEvent func(testEvent)) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e testEvent
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			r.stray.write(string(line) + "\n")
			continue
		}
		r.add(e)
		if onEvent != nil {
			onEvent(e)
		}
	}
	return sc.Err()
}

func (r *testRuns) add(e testEvent) {
	switch e.Action {
	case "build-output", "build-fail":
		if isTrace(e.Output) {
			return
		}
		// "example.com/p [example.com/p.test]": the package under test.
		path, _, _ := strings.Cut(e.ImportPath, " ")
		b, ok := r.builds[path]
		if !ok {
			b = &tail{}
			r.builds[path] = b
		}
		b.write(e.Output)
		return
	}
	if e.Package == "" {
		return
	}
	p := r.pkg(e.Package)
	if e.Test == "" {
		switch e.Action {
		case "start":
			p.started = true
		case "output":
			p.output.write(e.Output)
		case "pass", "fail", "skip":
			p.result = e.Action
			p.elapsed = time.Duration(e.Elapsed * float64(time.Second))
			if e.FailedBuild != "" {
				p.failedBuild = true
				path, _, _ := strings.Cut(e.FailedBuild, " ")
				if b := r.builds[path]; b != nil {
					p.buildOutput.write(b.String())
				}
			}
		}
		return
	}
	t := p.test(e.Test)
	switch e.Action {
	case "run":
		t.ran = true
	case "output":
		t.output.write(e.Output)
	case "pass", "fail", "skip":
		t.ran = true
		t.result = e.Action
	}
}

// sortedPackages returns the packages by import path.
func (r *testRuns) sortedPackages() []*packageRun {
	out := make([]*packageRun, 0, len(r.packages))
	for _, p := range r.packages {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].importPath < out[j].importPath })
	return out
}
