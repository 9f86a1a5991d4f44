package report

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Geometry of the SVG diagram, in pixels.
const (
	colWidth   = 190
	margin     = 20
	headHeight = 34
	rowHeight  = 30
	lineHeight = 15 // of a label's second and later lines
	charWidth  = 7  // of 12px sans-serif, roughly, rounded up; labels wrap to fit
	// pad keeps a label off the lifelines at its ends.
	pad = 6
	// maxLines bounds a label: a longer one is cut on its last line, the
	// full text in the row's <title>.
	maxLines = 8
)

// SVG renders d as an inline <svg> element whose ids start with id, so
// several diagrams can share a page. Labels too long for their lane
// (between the arrow's ends, or one column for a crash or a note) wrap
// onto more lines and their row grows, so they never cross another
// lifeline and are read whole; the full text is also in each row's
// <title>, shown on hover.
func (d Diagram) SVG(id string) string {
	col := map[string]int{}
	for i, p := range d.Participants {
		col[p.ID] = i
	}
	x := func(id string) float64 { return float64(margin + colWidth/2 + col[id]*colWidth) }
	// Each row's lines first: they set its height, and the rows' heights
	// the lifelines' length.
	lines := make([][]string, len(d.Events))
	rows := 0.0
	for i, e := range d.Events {
		switch e.Kind {
		case Note:
			lines[i] = wrap(e.Text, colWidth-10-16)
		case Crash:
			lines[i] = wrap(e.Text, colWidth-12-2*pad)
		default:
			// A label stays between its arrow's ends: past the head it
			// would cross other lifelines. A short arrow's label keeps
			// at least one column.
			lines[i] = wrap(e.Text, max(math.Abs(x(e.To)-x(e.From)), colWidth)-2*pad)
		}
		rows += rowHeight + extra(lines[i])
	}
	width := 2*margin + len(d.Participants)*colWidth
	height := 2*headHeight + int(rows) + 2*margin
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="sequence" role="img" width="%d" height="%d" viewBox="0 0 %d %d" font-family="system-ui, sans-serif" font-size="12">`, width, height, width, height)
	fmt.Fprintf(&b, `<defs><marker id="%s-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#333"/></marker></defs>`, id)
	top, bottom := float64(margin), float64(height-margin-headHeight)
	for _, p := range d.Participants {
		cx := x(p.ID)
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#999" stroke-dasharray="4 3"/>`, cx, top+headHeight, cx, bottom)
		for _, y := range []float64{top, bottom} {
			fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%d" height="%d" rx="4" fill="#eef2f7" stroke="#5b6b7f"/>`, cx-colWidth/2+10, y, colWidth-20, headHeight-8)
			fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle" font-weight="600">%s</text>`, cx, y+17, esc(p.Name))
		}
	}
	row := top + headHeight // where the next row starts
	for i, e := range d.Events {
		ls, more := lines[i], extra(lines[i])
		// y is the row's arrow; its label's lines stand above it, on
		// whole pixels so they are evenly spaced.
		y := math.RoundToEven(row + more + rowHeight*0.75)
		row += rowHeight + more
		// label writes the lines, the last at baseline.
		label := func(x, baseline float64, attrs string) {
			for k, l := range ls {
				fmt.Fprintf(&b, `<text x="%.0f" y="%.0f"%s>%s</text>`, x, baseline-float64(len(ls)-1-k)*lineHeight, attrs, esc(l))
			}
		}
		if e.Culprit {
			// The culprit's call stands on a red band across its lane.
			x1, x2 := min(x(e.From), x(e.To)), max(x(e.From), x(e.To))
			fmt.Fprintf(&b, `<g class="event culprit"><title>culprit: %s</title>`, esc(e.Text))
			fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" rx="3" fill="#fde2e2" stroke="#c0262d"/>`, x1-pad, y-17-more, x2-x1+2*pad, 23+more)
		} else {
			b.WriteString(`<g class="event">`)
			fmt.Fprintf(&b, `<title>%s</title>`, esc(e.Text))
		}
		switch e.Kind {
		case Note:
			cx := x(e.From)
			longest := 0
			for _, l := range ls {
				longest = max(longest, len([]rune(l)))
			}
			w := min(float64(longest)*charWidth+16, float64(colWidth-10))
			fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="#fff6c8" stroke="#b9a640"/>`, cx-w/2, y-15-more, w, 20+more)
			label(cx, y-1, ` text-anchor="middle"`)
		case Crash:
			cx := x(e.From)
			fmt.Fprintf(&b, `<path d="M%.0f,%.0f l12,12 m0,-12 l-12,12" stroke="#c0262d" stroke-width="3"/>`, cx-6, y-12)
			label(cx+12, y, ` fill="#c0262d" font-weight="600"`)
		default:
			x1, x2 := x(e.From), x(e.To)
			end := x2
			dash, marker, colour := "", ` marker-end="url(#`+id+`-arrow)"`, "#333"
			switch e.Kind {
			case Reply:
				dash = ` stroke-dasharray="5 4"`
			case Lost:
				end = x1 + (x2-x1)*0.7
				marker, colour = "", "#c0262d"
			}
			fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="%s"%s%s/>`, x1, y, end, y, colour, dash, marker)
			if e.Kind == Lost {
				fmt.Fprintf(&b, `<path d="M%.0f,%.0f l10,10 m0,-10 l-10,10" stroke="#c0262d" stroke-width="2.5"/>`, end-5, y-5)
			}
			if x2 >= x1 {
				label(x1+pad, y-5, fmt.Sprintf(` fill="%s"`, colour))
			} else {
				label(x1-pad, y-5, fmt.Sprintf(` text-anchor="end" fill="%s"`, colour))
			}
		}
		b.WriteString(`</g>`)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// extra is the height a label's lines add to its row.
func extra(lines []string) float64 { return float64(len(lines)-1) * lineHeight }

// wrap breaks text into lines of about width pixels, at spaces; a word
// wider than a line (a key, a long identifier) is broken after a - _ = /
// or , in its second half, else where the line ends. Past maxLines the
// last line is cut with an ellipsis.
func wrap(text string, width float64) []string {
	n := max(int(width/charWidth), 4)
	var lines []string
	var line []rune
	for _, w := range strings.Split(text, " ") {
		word := []rune(w)
		if len(line) > 0 && len(line)+1+len(word) <= n {
			line = append(append(line, ' '), word...)
			continue
		}
		if len(line) > 0 {
			lines = append(lines, string(line))
		}
		for len(word) > n {
			cut := n
			for k := n - 1; k >= n/2; k-- {
				if strings.ContainsRune("-_=/,", word[k]) {
					cut = k + 1
					break
				}
			}
			lines, word = append(lines, string(word[:cut])), word[cut:]
		}
		line = word
	}
	lines = append(lines, string(line))
	if len(lines) > maxLines {
		last := []rune(lines[maxLines-1])
		if len(last) >= n {
			last = last[:n-1]
		}
		lines = append(lines[:maxLines-1], string(last)+"…")
	}
	return lines
}

func esc(s string) string { return html.EscapeString(s) }

// Mermaid renders d as Mermaid sequenceDiagram source, for Markdown
// viewers that draw it (GitHub does).
func (d Diagram) Mermaid() string {
	var b strings.Builder
	b.WriteString("sequenceDiagram\n")
	for _, p := range d.Participants {
		fmt.Fprintf(&b, "  participant %s as %s\n", p.ID, mermaidText(p.Name))
	}
	for _, e := range d.Events {
		t := mermaidText(e.Text)
		switch e.Kind {
		case Call:
			if e.Culprit { // on a red band, as in the SVG
				fmt.Fprintf(&b, "  rect rgb(253, 226, 226)\n  %s->>%s: culprit: %s\n  end\n", e.From, e.To, t)
				continue
			}
			fmt.Fprintf(&b, "  %s->>%s: %s\n", e.From, e.To, t)
		case Reply:
			fmt.Fprintf(&b, "  %s-->>%s: %s\n", e.From, e.To, t)
		case Lost:
			fmt.Fprintf(&b, "  %s-x%s: %s\n", e.From, e.To, t)
		case Crash:
			fmt.Fprintf(&b, "  Note over %s: ✖ %s\n", e.From, t)
		case Note:
			fmt.Fprintf(&b, "  Note over %s: %s\n", e.From, t)
		}
	}
	return b.String()
}

// mermaidText escapes what Mermaid reads as syntax in a message: # starts
// an entity, ; ends a statement, and a newline ends the message.
func mermaidText(s string) string {
	return strings.NewReplacer("#", "#35;", ";", "#59;", "\n", " ", "%%", "#37;#37;").Replace(s)
}
