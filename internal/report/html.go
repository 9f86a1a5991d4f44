package report

import (
	"bytes"
	"fmt"
	"html/template"
	"strings"

	"github.com/runtwice/twice/internal/render"
)

// HTML renders the report as one self-contained page: no scripts, no
// external styles, fonts or images, so it opens offline and from a CI
// artifact. The diagrams are inline SVG.
func (r *Report) HTML() ([]byte, error) {
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, r); err != nil {
		return nil, fmt.Errorf("rendering index.html: %w", err)
	}
	return b.Bytes(), nil
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"mark":  outcomeMark,
	"word":  outcomeWord,
	"cell":  cellText,
	"dur":   shortDuration,
	"shown": func(j Job) []Finding { return j.Shown() },
	"same":  sameAs,
	"diff":  diffText,
	"dline": deliveryLine,
	"wrap":  wrapFault,
	"lookup": func(j Job, fault string) *Cell {
		if c, ok := j.Cell(fault); ok {
			return &c
		}
		return nil
	},
	"svg": func(j Job, f Finding, id string) template.HTML {
		// The SVG escapes every text it draws.
		return template.HTML(BuildDiagram(j, f).SVG(id)) //nolint:gosec // built by our code, texts escaped
	},
	"anchor": func(parts ...any) string {
		var b strings.Builder
		for _, p := range parts {
			for _, r := range fmt.Sprint(p) {
				if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
					b.WriteRune(r)
				} else {
					b.WriteRune('-')
				}
			}
			b.WriteRune('_')
		}
		return b.String()
	},
	"worst": render.Severity,
	"problemClass": func(p Problem) string {
		if p.Fatal || p.Kind == ProblemTestFailed {
			return "bad"
		}
		return "warn"
	},
}).Parse(pageHTML))

// wrapFault lets a fault's name break after its hyphens, so the matrix's
// columns are as narrow as its cells: every fault fits a 1280 px window.
func wrapFault(name string) template.HTML {
	parts := strings.Split(template.HTMLEscapeString(name), "-")
	return template.HTML(strings.Join(parts, "-<wbr>")) //nolint:gosec // escaped above
}

// pageHTML is the page. The matrix's job column is sticky: with many
// faults the table scrolls sideways and the job's name stays in view (its
// status colour is opaque, so the cells scrolling under it do not show).
const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>twice: idempotency report</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5rem; color: #1d2430; background: #fff; }
h1 { font-size: 1.5rem; margin: 0 0 .3rem; }
h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #d6dbe3; padding-bottom: .2rem; }
h3 { font-size: 1.05rem; margin-top: 1.5rem; }
code, pre { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: .85rem; }
pre { background: #f5f7fa; border: 1px solid #d6dbe3; padding: .6rem .8rem; overflow-x: auto; }
.headline { font-weight: 600; font-size: 1.05rem; }
.meta { color: #5b6b7f; }
table.matrix { border-collapse: collapse; margin-top: .5rem; font-size: .8rem; }
table.matrix th, table.matrix td { border: 1px solid #d6dbe3; padding: .25rem .3rem; text-align: center; white-space: nowrap; }
table.matrix th.fault { white-space: normal; font-size: .72rem; min-width: 3rem; vertical-align: bottom; line-height: 1.15; }
table.matrix th.job, table.matrix td.job { text-align: left; white-space: normal; min-width: 10rem; max-width: 13rem; overflow-wrap: anywhere; }
table.matrix td.job .test { display: block; font-size: .75rem; color: #5b6b7f; }
h2 .test { font-weight: normal; color: #5b6b7f; font-size: .95rem; }
ul.tallies { list-style: none; padding: 0; margin: .6rem 0; display: flex; flex-wrap: wrap; gap: .5rem; }
ul.tallies li { border: 1px solid #d6dbe3; border-radius: 4px; padding: .3rem .7rem; }
ul.tallies li b { font-size: 1.2rem; margin-right: .2rem; }
ul.tallies li.t-idempotent { background: #e3f4e6; color: #1e6b2f; }
ul.tallies li.t-expected-finding { background: #fff1cc; color: #7a5a00; }
ul.tallies li.t-finding { background: #fbe0e0; color: #9b1c1c; }
ul.tallies li.t-flaky { background: #e8e3f7; color: #4b2f8f; }
ul.tallies li.t-error { background: #f1e4e4; color: #6b1c1c; }
ul.tallies li.zero { background: #fafafa; color: #8a96a6; }
table.matrix th.name, table.matrix td.name { position: sticky; left: 0; z-index: 1; box-shadow: 1px 0 0 #d6dbe3; }
table.matrix thead th { background: #eef2f7; font-weight: 600; font-size: .85rem; }
td.idempotent { background: #e3f4e6; color: #1e6b2f; }
td.expected-finding { background: #fff1cc; color: #7a5a00; }
td.flaky { background: #e8e3f7; color: #4b2f8f; }
td.finding { background: #fbe0e0; color: #9b1c1c; font-weight: 600; }
td.none { background: #fafafa; }
td a { color: inherit; }
.legend span { margin-right: 1rem; }
.problems li.bad { color: #9b1c1c; }
.problems li.warn { color: #7a5a00; }
section.job { margin-top: 2rem; }
.finding { border-left: 4px solid #d6dbe3; padding-left: 1rem; margin: 1rem 0 2rem; }
.finding.finding-finding { border-color: #c0262d; }
.finding.finding-expected-finding { border-color: #d9a400; }
.finding.finding-flaky { border-color: #6b4fbf; }
.why { background: #fff8e1; border: 1px solid #f0d890; padding: 0.25rem 0.75rem; margin: 0.5rem 0; }
.why h4 { margin: 0.25rem 0; }
.why code { white-space: pre-wrap; word-break: break-word; }
.why .fix { margin: 0.25rem 0 0.5rem; }
.diagram, .scroll { overflow-x: auto; }
.replay code { background: #1d2430; color: #f5f7fa; padding: .3rem .5rem; display: inline-block; }
</style>
</head>
<body>
<h1>twice: idempotency report</h1>
<p class="headline" id="headline">{{.Title}}</p>
<ul class="tallies" id="tallies">{{range .Tallies}}<li class="t-{{.Class}}{{if not .N}} zero{{end}}"><b>{{.N}}</b> {{.What}}</li>{{end}}</ul>
<p class="meta">{{.Summary.Jobs}} jobs · <code>{{.Command}}</code>{{.ShardNote}} · {{dur .Duration}} · {{.Started.UTC.Format "2006-01-02 15:04:05 UTC"}} · exit code {{.ExitCode}}</p>
{{with .ShownProblems}}
<h2>Problems</h2>
<ul class="problems" id="problems">
{{range .}}<li class="{{problemClass .}}">{{.Message}}{{if .Output}}<pre>{{.Output}}</pre>{{end}}</li>
{{end}}</ul>
{{end}}
{{if .Jobs}}
<h2>Jobs × faults</h2>
<div class="scroll"><table class="matrix" id="matrix">
<thead><tr><th class="job name">job · test</th>{{range .Faults}}<th class="fault" title="{{.}}">{{wrap .}}</th>{{end}}</tr></thead>
<tbody>
{{range $j := .Jobs}}<tr data-status="{{.Outcome}}"><td class="job name {{.Outcome}}">{{mark .Outcome}} {{if .Findings}}<a href="#{{anchor .Package .Test .Name}}">{{.Name}}</a>{{else}}{{.Name}}{{end}}<span class="test" title="{{.Package}}"><code>{{$.PkgName .Package}}</code> {{.Test}}</span></td>{{range $f := $.Faults}}{{with lookup $j $f}}<td class="{{.Outcome}}" title="{{$j.Name}} ({{$j.Test}}) under {{$f}}: {{word .Outcome}}">{{cell .}}</td>{{else}}<td class="none"></td>{{end}}{{end}}</tr>
{{end}}</tbody>
</table></div>
<p class="legend"><span>✓ idempotent</span><span>◆ known not idempotent (expected)</span><span>~ flaky</span><span>✗ finding: not idempotent</span><span>n/m: scenarios that differ / scenarios run</span></p>
{{end}}
{{with .Warnings}}
<h2>Warnings</h2>
<ul class="warnings" id="warnings">
{{range .}}<li>{{.}}</li>
{{end}}</ul>
{{end}}
{{with .WithVolatile}}
<h2>Left out as volatile</h2>
<p>These differed between two clean runs, so no scenario compares them, in passing checks too:</p>
<ul class="volatile" id="volatile">
{{range .}}<li>{{.Name}} <span class="test">({{$.PkgName .Package}} {{.Test}})</span>: {{range $i, $v := .Volatile}}{{if $i}}, {{end}}<code>{{$v}}</code>{{end}}{{with .TimeHint}}; {{.}}{{end}}</li>
{{end}}</ul>
{{end}}
{{with .WithoutCheck}}
<h2>Packages without a check</h2>
<ul class="nocheck" id="nocheck">
{{range .}}<li><code>{{.Package}}</code>: {{.Why}}</li>
{{end}}</ul>
{{end}}
{{with .WithoutCheckWorkers}}
<h2>Workers without a check</h2>
<ul class="nocheck" id="noworkercheck">
{{range .}}<li>the {{.Registry}} of {{$.PkgName .Package}} {{.Test}} registers {{range $i, $k := .Unchecked}}{{if $i}}, {{end}}<code>{{$k}}</code>{{end}}, which no sample checks ({{len .Kinds}} kinds registered)</li>
{{end}}</ul>
{{end -}}
{{range $ji, $j := .Jobs}}{{if .Findings}}
<section class="job" id="{{anchor .Package .Test .Name}}">
<h2>{{mark .Outcome}} {{.Name}} <span class="test">({{$.PkgName .Package}} {{.Test}})</span>: {{word .Outcome}}</h2>
<p><code>{{.Package}}</code> {{.Test}} · {{.Failed}} of {{.Scenarios}} scenarios differ from one clean run{{with worst .Worst}} · worst: {{.}}{{end}}{{if gt .Runs 1}} · {{.Runs}} runs{{end}} · rerun: <code>{{.Rerun}}</code></p>
{{if .Expected}}<p>Expected: {{.Expected}}</p>{{end}}
{{if .Volatile}}<p class="meta">Left out as volatile (they differ between two clean runs): {{range $i, $v := .Volatile}}{{if $i}}, {{end}}<code>{{$v}}</code>{{end}}</p>{{end}}
<details><summary>The clean run's steps (the fault points)</summary><ol>{{range .Steps}}<li><code>{{if .Effect}}effect: {{end}}{{.Text}}</code></li>{{end}}</ol></details>
{{range $fi, $f := shown $j}}
<div class="finding finding-{{.Outcome}}">
<h3>{{.Fault}} <code>{{.Schedule}}</code></h3>
<div class="diagram">{{svg $j $f (anchor "d" $ji $fi)}}</div>
<ul>{{range .Deliveries}}{{with dline .}}<li>{{.}}</li>{{end}}{{end}}{{range .Problems}}<li>{{.}}</li>{{end}}{{with .Rerun}}<li>{{.}}</li>{{end}}</ul>
{{with .Culprits}}<div class="why"><h4>Why</h4><ul>{{range .}}<li><code>{{.Text}}</code>{{with .Fix}}<p class="fix">{{.}}</p>{{end}}</li>{{end}}</ul></div>{{end}}
{{with diff .}}<pre class="diff">{{.}}</pre>{{end}}
<p class="replay">Replay: <code>{{.Replay}}</code></p>
{{if .Database}}<p class="meta">Kept database: <code>{{.Database}}</code></p>{{end}}{{if .Dump}}<p class="meta">Its server stopped with the test; dumped to <code>{{.Dump}}</code> (restore with <code>createdb NAME &amp;&amp; psql -d NAME -f FILE</code>, or list and drop with <code>twice kept</code>)</p>{{end}}{{if .DumpError}}<p class="meta">Its server stopped with the test, and it could not be dumped, so it is gone:</p><pre>{{.DumpError}}</pre>{{end}}
{{with same $j $f}}<p class="meta same">The same difference under: {{range $i, $s := .}}{{if $i}}, {{end}}{{$s.Fault}}{{with $s.Schedule}} <code>{{.}}</code>{{end}}{{with $s.Database}} (its database kept: <code>{{.}}</code>){{end}}{{with $s.Dump}} (its database dumped to <code>{{.}}</code>){{end}}{{end}}</p>{{end}}
</div>
{{end}}
</section>
{{end}}{{end}}
</body>
</html>
`
