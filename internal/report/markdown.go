package report

import (
	"fmt"
	"strings"

	"github.com/runtwice/twice/internal/text"

	"github.com/runtwice/twice/internal/render"
)

// Markdown renders the report for a CI job summary (GitHub's
// $GITHUB_STEP_SUMMARY): the matrix as a table, each finding's schedule as
// a Mermaid sequence diagram, its diffs and the command that replays it.
func (r *Report) Markdown() string {
	var b strings.Builder
	b.WriteString("# twice: idempotency report\n\n")
	fmt.Fprintf(&b, "**%s**\n\n", mdEscape(r.Title()))
	var tallies []string
	for _, t := range r.Tallies() {
		tallies = append(tallies, fmt.Sprintf("**%d** %s", t.N, mdEscape(t.What)))
	}
	fmt.Fprintf(&b, "%s\n\n", strings.Join(tallies, " · "))
	fmt.Fprintf(&b, "%d %s · `%s`%s · %s · exit code %d\n", r.Summary.Jobs, text.Plural(r.Summary.Jobs, "job"), r.Command, r.ShardNote(), shortDuration(r.Duration), r.ExitCode)
	if shown := r.ShownProblems(); len(shown) > 0 {
		b.WriteString("\n## Problems\n\n")
		for _, p := range shown {
			mark := "⚠"
			if p.Fatal || p.Kind == ProblemTestFailed {
				mark = "✗"
			}
			fmt.Fprintf(&b, "- %s %s\n", mark, mdEscape(p.Message))
			if p.Output != "" {
				b.WriteString(indent(fence("", p.Output), "  "))
			}
		}
	}
	if len(r.Jobs) > 0 {
		b.WriteString("\n## Jobs × faults\n\n")
		b.WriteString("| job | test |")
		for _, f := range r.Faults {
			fmt.Fprintf(&b, " %s |", f)
		}
		b.WriteString("\n|---|---|")
		b.WriteString(strings.Repeat("---|", len(r.Faults)))
		b.WriteString("\n")
		for _, j := range r.Jobs {
			fmt.Fprintf(&b, "| %s %s | `%s` %s |", outcomeMark(j.Outcome), mdEscape(j.Name), r.PkgName(j.Package), mdEscape(j.Test))
			for _, f := range r.Faults {
				c, ok := j.Cell(f)
				if !ok {
					b.WriteString(" |")
					continue
				}
				fmt.Fprintf(&b, " %s |", cellText(c))
			}
			b.WriteString("\n")
		}
		b.WriteString("\n✓ idempotent · ◆ known not idempotent (expected) · ~ flaky · ✗ finding: not idempotent · n/m: scenarios that differ / scenarios run\n")
	}
	if none := r.WithoutCheck(); len(none) > 0 {
		b.WriteString("\n## Packages without a check\n\n")
		for _, n := range none {
			fmt.Fprintf(&b, "- `%s`: %s\n", n.Package, mdEscape(n.Why))
		}
	}
	if gs := r.WithoutCheckWorkers(); len(gs) > 0 {
		b.WriteString("\n## Workers without a check\n\n")
		for _, g := range gs {
			fmt.Fprintf(&b, "- the %s of `%s` %s registers %s, which no sample checks (%d %s registered)\n", g.Registry, g.Package, g.Test, "`"+strings.Join(g.Unchecked, "`, `")+"`", len(g.Kinds), text.Plural(len(g.Kinds), "kind"))
		}
	}
	if ws := r.Warnings(); len(ws) > 0 {
		b.WriteString("\n## Warnings\n\n")
		for _, w := range ws {
			fmt.Fprintf(&b, "- %s\n", mdEscape(w))
		}
	}
	if vol := r.WithVolatile(); len(vol) > 0 {
		b.WriteString("\n## Left out as volatile\n\nThese differed between two clean runs, so no scenario compares them, in passing checks too:\n\n")
		for _, j := range vol {
			fmt.Fprintf(&b, "- %s (%s %s): `%s`", mdEscape(j.Name), mdEscape(r.PkgName(j.Package)), mdEscape(j.Test), strings.Join(j.Volatile, "`, `"))
			if h := j.TimeHint(); h != "" {
				fmt.Fprintf(&b, "; %s", mdEscape(h))
			}
			b.WriteString("\n")
		}
	}
	for _, j := range r.Jobs {
		if len(j.Findings) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n## %s %s (%s %s): %s\n\n", outcomeMark(j.Outcome), mdEscape(j.Name), mdEscape(r.PkgName(j.Package)), mdEscape(j.Test), outcomeWord(j.Outcome))
		fmt.Fprintf(&b, "`%s` %s · %d of %d scenarios differ from one clean run", j.Package, mdEscape(j.Test), j.Failed, j.Scenarios)
		if w := render.Severity(j.Worst); w != "" {
			fmt.Fprintf(&b, " · worst: %s", w)
		}
		if j.Runs > 1 {
			fmt.Fprintf(&b, " · %d runs", j.Runs)
		}
		b.WriteString("\n")
		if j.Expected != "" {
			fmt.Fprintf(&b, "\nExpected: %s\n", mdEscape(j.Expected))
		}
		if len(j.Volatile) > 0 {
			fmt.Fprintf(&b, "\nLeft out as volatile (they differ between two clean runs): %s\n", mdEscape(strings.Join(j.Volatile, ", ")))
		}
		for _, f := range j.Shown() {
			fmt.Fprintf(&b, "\n### %s `%s`\n\n", f.Fault, f.Schedule)
			b.WriteString(fence("mermaid", BuildDiagram(j, f).Mermaid()))
			for _, d := range f.Deliveries {
				if line := deliveryLine(d); line != "" {
					fmt.Fprintf(&b, "- %s\n", mdEscape(line))
				}
			}
			for _, p := range f.Problems {
				fmt.Fprintf(&b, "- %s\n", mdEscape(p))
			}
			if f.Rerun != "" {
				fmt.Fprintf(&b, "- %s\n", mdEscape(f.Rerun))
			}
			if len(f.Culprits) > 0 {
				b.WriteString("\n**Why**\n\n")
				said := map[string]bool{}
				for _, c := range f.Culprits {
					fmt.Fprintf(&b, "- %s\n", mdEscape(c.Text))
					if c.Fix != "" && !said[c.Fix] {
						said[c.Fix] = true
						fmt.Fprintf(&b, "  - %s\n", mdEscape(c.Fix))
					}
				}
			}
			if diff := diffText(f); diff != "" {
				b.WriteString("\n" + fence("diff", diff))
			}
			fmt.Fprintf(&b, "\nReplay: `%s`\n", f.Replay)
			if line := keptLine(f); line != "" {
				fmt.Fprintf(&b, "\n%s\n", line)
			}
			if same := sameAs(j, f); len(same) > 0 {
				var names []string
				for _, s := range same {
					name := s.Fault
					if s.Schedule != "" {
						name = fmt.Sprintf("%s `%s`", s.Fault, s.Schedule)
					}
					if line := keptLine(Finding{Database: s.Database, Dump: s.Dump}); line != "" {
						name += " (" + strings.ToLower(line[:1]) + line[1:] + ")"
					}
					names = append(names, name)
				}
				fmt.Fprintf(&b, "\nThe same difference under: %s\n", strings.Join(names, ", "))
			}
		}
	}
	return b.String()
}

// cellText is a matrix cell: the status mark, and how many scenarios
// differed of how many ran.
func cellText(c Cell) string {
	if c.Outcome == OutcomeIdempotent {
		return fmt.Sprintf("%s %d", outcomeMark(c.Outcome), c.Scenarios)
	}
	return fmt.Sprintf("%s %d/%d", outcomeMark(c.Outcome), c.Failed, c.Scenarios)
}

// deliveryLine says what went wrong in a delivery, or nothing.
func deliveryLine(d Delivery) string {
	line := whatWentWrong(d)
	add := func(more string) {
		line = strings.TrimPrefix(strings.TrimSpace(line+"; "+more), "; ")
	}
	if d.Unheld != "" {
		add(d.Label + " was not held where the schedule says: " + d.Unheld)
	}
	if d.Waited > 0 && d.NotDelivered == "" {
		add(fmt.Sprintf("%s ran once its job was due, the clock moved +%s to it", d.Label, shortDuration(d.Waited)))
	}
	return line
}

func whatWentWrong(d Delivery) string {
	switch {
	case d.NotDelivered != "":
		return fmt.Sprintf("%s was not delivered: %s", d.Label, d.NotDelivered)
	case d.Outcome != "" && d.Err != "":
		return fmt.Sprintf("%s %s, then returned an error: %s", d.Label, d.Outcome, text.FirstLine(d.Err))
	case d.Outcome != "":
		return d.Label + " " + d.Outcome
	case d.Err != "":
		return fmt.Sprintf("%s returned an error: %s", d.Label, text.FirstLine(d.Err))
	}
	return ""
}

// diffText is a finding's state and effect differences as one text.
func diffText(f Finding) string {
	var parts []string
	for _, d := range f.StateDiff {
		parts = append(parts, fmt.Sprintf("table %q mismatch (-once +twice):\n%s", d.Table, strings.TrimRight(d.Diff, "\n")))
		parts = append(parts, d.Notes...)
	}
	if f.EffectDiff != "" {
		parts = append(parts, strings.TrimRight(f.EffectDiff, "\n"))
	}
	return strings.Join(parts, "\n")
}

// maxSameAs bounds how many findings with the same differences are named
// one by one; report.json lists them all.
const maxSameAs = 5

// sameRef names a finding with the same differences: its fault and
// schedule, or, with Schedule empty, "and N more" in Fault.
type sameRef struct{ Fault, Schedule, Database, Dump string }

// sameAs lists the findings that share f's differences: the first
// maxSameAs, then how many more; one whose database was kept is always
// listed, with it, so no evidence goes unnamed. Each page marks the
// schedule up its own way.
func sameAs(j Job, f Finding) []sameRef {
	var out []sameRef
	n, more := 0, 0
	for _, o := range j.Findings {
		if o.SameAs != f.Schedule {
			continue
		}
		n++
		if n <= maxSameAs || o.Database != "" || o.Dump != "" {
			out = append(out, sameRef{Fault: o.Fault, Schedule: o.Schedule, Database: o.Database, Dump: o.Dump})
		} else {
			more++
		}
	}
	if more > 0 {
		out = append(out, sameRef{Fault: fmt.Sprintf("and %d more", more)})
	}
	return out
}

// fence wraps text in a code fence longer than any backtick run in it.
func fence(lang, text string) string {
	ticks := "```"
	for strings.Contains(text, ticks) {
		ticks += "`"
	}
	return ticks + lang + "\n" + strings.TrimRight(text, "\n") + "\n" + ticks + "\n"
}

func indent(text, prefix string) string {
	lines := strings.SplitAfter(text, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "")
}

// mdEscape keeps text from turning into Markdown or HTML: table pipes,
// emphasis, tags.
func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "*", `\*`, "_", `\_`, "<", "&lt;", ">", "&gt;", "`", "\\`", "[", `\[`).Replace(s)
}

// keptLine says where the evidence of a finding is: its kept database
// and its dump, or why the dump failed; "" when nothing was kept.
func keptLine(f Finding) string {
	var parts []string
	if f.Database != "" {
		parts = append(parts, fmt.Sprintf("Kept database: `%s`", f.Database))
	}
	if f.Dump != "" {
		parts = append(parts, fmt.Sprintf("dumped to `%s` (restore with `createdb NAME && psql -d NAME -f FILE`, or list and drop with `twice kept`)", f.Dump))
	}
	if f.DumpError != "" {
		parts = append(parts, "it could not be dumped when its server stopped, so it is gone: "+mdEscape(text.FirstLine(f.DumpError)))
	}
	if len(parts) == 0 {
		return ""
	}
	line := strings.Join(parts, "; ")
	return strings.ToUpper(line[:1]) + line[1:]
}
