package report

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"sort"
	"strings"
)

// JUnit renders the report as JUnit XML, in the shape Jenkins' junit-10
// schema describes and GitHub, GitLab and Jenkins read.
//
// Every package is a <testsuite>. Every job × fault cell is a <testcase>
// named "TestX/fault", classname the import path: a cell with an
// unexpected finding or a flaky verdict has a <failure> holding each
// failed schedule with its differences and replay command; an expected
// finding passes, with the finding in <system-out>. One testcase per cell
// keeps a CI's test history per fault: "TestX/crash-mid-job started
// failing" says more than "TestX failed". Problems are testcases too: a
// package that did not compile or a crashed binary an <error>, a failing
// test that ran no check a <failure>, a package without harness checks
// <skipped>.
func (r *Report) JUnit() ([]byte, error) {
	host := r.Host
	if host == "" {
		host = "localhost"
	}
	suites := map[string]*junitSuite{}
	suite := func(pkg string) *junitSuite {
		if s, ok := suites[pkg]; ok {
			return s
		}
		name := pkg
		if name == "" {
			name = "twice"
		}
		s := &junitSuite{Name: name, Package: name, Hostname: host, Timestamp: r.Started.UTC().Format("2006-01-02T15:04:05")}
		for _, p := range r.Packages {
			if p.ImportPath == pkg {
				s.seconds = p.Duration.Duration().Seconds()
			}
		}
		suites[pkg] = s
		return s
	}
	for _, j := range r.Jobs {
		s := suite(j.Package)
		for _, c := range j.Cells {
			tc := junitCase{Name: j.Test + "/" + c.Fault, Classname: j.Package, Time: fmt.Sprintf("%.3f", c.Duration.Duration().Seconds())}
			var findings []Finding
			for _, f := range j.Findings {
				if f.Fault == c.Fault {
					findings = append(findings, f)
				}
			}
			text := cellReport(j, c, findings)
			switch c.Outcome {
			case OutcomeFinding, OutcomeFlaky:
				msg := fmt.Sprintf("job %q: %d of %d %s scenarios are not idempotent", j.Name, c.Failed, c.Scenarios, c.Fault)
				if c.Outcome == OutcomeFlaky {
					msg = fmt.Sprintf("job %q: %s gave different verdicts on different runs (flaky)", j.Name, c.Fault)
				}
				tc.Failure = &junitMessage{Message: msg, Type: string(c.Outcome), Text: text}
			case OutcomeExpected:
				tc.SystemOut = "expected finding: " + j.Expected + "\n\n" + text
			}
			s.add(tc)
		}
	}
	for _, p := range r.Summary.Problems {
		s := suite(p.Package)
		name := p.Test
		if name == "" {
			name = "(" + p.Kind + ")"
		}
		tc := junitCase{Name: name, Classname: s.Name, Time: "0.000"}
		m := &junitMessage{Message: p.Message, Type: p.Kind, Text: p.Output}
		switch {
		case p.Kind == ProblemTestFailed:
			tc.Failure = m
		case p.Fatal:
			tc.Error = m
		default:
			tc.Skipped = m
		}
		s.add(tc)
	}
	names := make([]string, 0, len(suites))
	for n := range suites {
		names = append(names, n)
	}
	sort.Strings(names)
	all := junitSuites{Name: "twice", Time: fmt.Sprintf("%.3f", r.Duration.Duration().Seconds())}
	for i, n := range names {
		s := suites[n]
		s.ID = i
		s.Time = fmt.Sprintf("%.3f", s.seconds)
		all.Tests += s.Tests
		all.Failures += s.Failures
		all.Errors += s.Errors
		all.Suites = append(all.Suites, *s)
	}
	var b bytes.Buffer
	b.WriteString(xml.Header)
	enc := xml.NewEncoder(&b)
	enc.Indent("", "  ")
	if err := enc.Encode(all); err != nil {
		return nil, fmt.Errorf("encoding junit.xml: %w", err)
	}
	b.WriteString("\n")
	return b.Bytes(), nil
}

// cellReport is the text of a cell's findings: each failed schedule, what
// went wrong, the differences and the replay command.
func cellReport(j Job, c Cell, findings []Finding) string {
	var b strings.Builder
	for _, f := range findings {
		fmt.Fprintf(&b, "%s (schedule %s):\n", f.Fault, f.Schedule)
		for _, d := range f.Deliveries {
			if line := deliveryLine(d); line != "" {
				fmt.Fprintf(&b, "  %s\n", line)
			}
		}
		for _, p := range f.Problems {
			fmt.Fprintf(&b, "  %s\n", p)
		}
		if f.Rerun != "" {
			fmt.Fprintf(&b, "  %s\n", f.Rerun)
		}
		said := map[string]bool{}
		for _, c := range f.Culprits {
			fmt.Fprintf(&b, "  %s\n", c.Text)
			if c.Fix != "" && !said[c.Fix] {
				said[c.Fix] = true
				fmt.Fprintf(&b, "    %s\n", c.Fix)
			}
		}
		src := f
		if f.SameAs != "" {
			for _, o := range j.Findings {
				if o.Schedule == f.SameAs {
					src = o
				}
			}
		}
		if diff := diffText(src); diff != "" {
			b.WriteString(diff + "\n")
		}
		fmt.Fprintf(&b, "replay: %s\n\n", f.Replay)
	}
	if len(findings) == 0 && c.Outcome != OutcomeIdempotent {
		fmt.Fprintf(&b, "rerun: %s\n", j.Rerun)
	}
	return strings.TrimRight(b.String(), "\n")
}

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string      `xml:"name,attr"`
	Package    string      `xml:"package,attr"`
	ID         int         `xml:"id,attr"`
	Tests      int         `xml:"tests,attr"`
	Failures   int         `xml:"failures,attr"`
	Errors     int         `xml:"errors,attr"`
	Skipped    int         `xml:"skipped,attr"`
	Time       string      `xml:"time,attr"`
	Timestamp  string      `xml:"timestamp,attr"`
	Hostname   string      `xml:"hostname,attr"`
	Properties struct{}    `xml:"properties"`
	Cases      []junitCase `xml:"testcase"`

	seconds float64
}

func (s *junitSuite) add(tc junitCase) {
	s.Tests++
	switch {
	case tc.Failure != nil:
		s.Failures++
	case tc.Error != nil:
		s.Errors++
	case tc.Skipped != nil:
		s.Skipped++
	}
	s.Cases = append(s.Cases, tc)
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Skipped   *junitMessage `xml:"skipped"`
	Error     *junitMessage `xml:"error"`
	Failure   *junitMessage `xml:"failure"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}
