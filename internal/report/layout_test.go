package report_test

import (
	"cmp"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/internal/report"
)

// everyFault is every column the matrix can have: the default faults,
// exploration and replay.
var everyFault = []faults.Name{
	faults.NameRunTwice, faults.NameProducerRetry, faults.NameCrashBeforeAck, faults.NameLostAck,
	faults.NameCrashMidJob, faults.NameAmbiguousCommit, faults.NameEffectLostReply, faults.NameEffectFailed,
	faults.NameVisibilityTimeout, faults.NameConcurrentDelivery, faults.NameConcurrentProducerRetry,
	faults.NameRedrive, faults.NameExplore, faults.NameReplay,
}

// widestReport is the fixture with a column for every fault and the
// widest cells each can hold (n/m with two-digit counts), or the report
// in $TWICE_REPORT_JSON (a real run's report.json) when that is set.
func widestReport(t *testing.T) *report.Report {
	t.Helper()
	if path := os.Getenv("TWICE_REPORT_JSON"); path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var r report.Report
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatal(err)
		}
		return &r
	}
	r := fixture(t)
	r.Faults = nil
	for _, f := range everyFault {
		r.Faults = append(r.Faults, string(f))
	}
	for i := range r.Jobs {
		j := &r.Jobs[i]
		if i == 0 {
			j.Name, j.Test = "payout-with-random-key-and-a-long-name", "TestPayoutWithRandomKeyAndALongName"
		}
		j.Cells = nil
		for _, f := range r.Faults {
			j.Cells = append(j.Cells, report.Cell{Fault: f, Outcome: report.OutcomeExpected, Scenarios: 24, Failed: 23})
		}
	}
	return r
}

// TestMatrixFits1280 opens the report in headless chromium in a 1280 px
// window: the page does not scroll sideways, the matrix does not either,
// and every fault's column is on screen with its name whole. The
// screenshot (PNG) is kept in $TWICE_ARTIFACTS, or the test's temp dir,
// and logged.
func TestMatrixFits1280(t *testing.T) {
	r := widestReport(t)
	ctx := openReport(t, r, "#matrix")
	type layout struct {
		Viewport    float64  `json:"viewport"`
		PageScroll  float64  `json:"pageScroll"`
		BoxScroll   float64  `json:"boxScroll"`
		BoxWidth    float64  `json:"boxWidth"`
		Columns     int      `json:"columns"`
		OffScreen   []string `json:"offScreen"`
		Clipped     []string `json:"clipped"`
		TalliesSeen int      `json:"talliesSeen"`
	}
	l, err := chromedp.Run(ctx, chromedp.Evaluate[layout](`(() => {
		const vw = document.documentElement.clientWidth, box = document.querySelector('.scroll');
		const ths = [...document.querySelectorAll('#matrix th.fault')];
		return {
			viewport: vw, pageScroll: document.documentElement.scrollWidth,
			boxScroll: box.scrollWidth, boxWidth: box.clientWidth, columns: ths.length,
			offScreen: ths.filter(th => { const r = th.getBoundingClientRect(); return r.left < 0 || r.right > vw }).map(th => th.title),
			clipped: ths.filter(th => th.scrollWidth > th.clientWidth + 1).map(th => th.title),
			talliesSeen: [...document.querySelectorAll('#tallies li')].filter(li => li.getBoundingClientRect().right <= vw).length,
		} })()`))
	if err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	top, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	shotPath, topPath := keepShot(t, "report-1280.png", shot), keepShot(t, "report-1280-window.png", top)
	t.Logf("screenshots: %s (the window), %s (the page); layout %+v", topPath, shotPath, l)

	if l.Columns != len(r.Faults) {
		t.Errorf("the matrix has %d fault columns, want %d", l.Columns, len(r.Faults))
	}
	if l.PageScroll > l.Viewport {
		t.Errorf("the page is %v px wide in a %v px window: it scrolls sideways", l.PageScroll, l.Viewport)
	}
	if l.BoxScroll > l.BoxWidth {
		t.Errorf("the matrix is %v px wide in its %v px box: it scrolls sideways", l.BoxScroll, l.BoxWidth)
	}
	if len(l.OffScreen) > 0 {
		t.Errorf("fault columns off screen at 1280 px: %q", l.OffScreen)
	}
	if len(l.Clipped) > 0 {
		t.Errorf("fault names cut in their headers: %q", l.Clipped)
	}
	if l.TalliesSeen != 5 {
		t.Errorf("%d of the headline's 5 counts are on screen", l.TalliesSeen)
	}
}

// TestWhyAboveTheDiff1280 opens a report with culprits in a 1280 px
// window: every finding that names a culprit shows its Why block (the
// culprit and the fix) whole, inside the window's width, above the diff,
// and its diagram marks the culprit's call. The block's screenshot is
// kept beside the page's (report-1280-why.png).
func TestWhyAboveTheDiff1280(t *testing.T) {
	r := fixture(t)
	ctx := openReport(t, r, ".why")
	type why struct {
		Finding  string  `json:"finding"`
		Top      float64 `json:"top"`
		Right    float64 `json:"right"`
		Height   float64 `json:"height"`
		Cut      bool    `json:"cut"`
		Fixes    int     `json:"fixes"`
		DiffTop  float64 `json:"diffTop"` // -1: the finding has no diff
		Marked   int     `json:"marked"`
		Viewport float64 `json:"viewport"`
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[[]why](`[...document.querySelectorAll('.finding')].filter(f => f.querySelector('.why')).map(f => {
		const w = f.querySelector('.why'), r = w.getBoundingClientRect(), d = f.querySelector('.diff');
		return {
			finding: f.querySelector('h3').textContent, top: r.top + scrollY, right: r.right, height: r.height,
			cut: w.scrollWidth > w.clientWidth + 1, fixes: w.querySelectorAll('.fix').length,
			diffTop: d ? d.getBoundingClientRect().top + scrollY : -1,
			marked: f.querySelectorAll('.diagram g.culprit').length, viewport: document.documentElement.clientWidth,
		} })`))
	if err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(".why")))
	if err != nil {
		t.Fatal(err)
	}
	shotPath := keepShot(t, "report-1280-why.png", shot)
	t.Logf("screenshot of the first Why block: %s; blocks %+v", shotPath, got)

	withCulprits := 0
	for _, j := range r.Jobs {
		for _, f := range j.Shown() {
			if len(f.Culprits) > 0 {
				withCulprits++
			}
		}
	}
	if withCulprits == 0 || len(got) != withCulprits {
		t.Fatalf("%d findings show a Why block, want the %d shown that name culprits", len(got), withCulprits)
	}
	for _, w := range got {
		switch {
		case w.Height == 0:
			t.Errorf("%s: the Why block is not shown", w.Finding)
		case w.Right > w.Viewport || w.Cut:
			t.Errorf("%s: the Why block is cut at 1280 px (its right edge at %v px, the window %v px)", w.Finding, w.Right, w.Viewport)
		case w.Fixes == 0:
			t.Errorf("%s: the Why block says no fix", w.Finding)
		case w.DiffTop >= 0 && w.Top > w.DiffTop:
			t.Errorf("%s: the Why block (at %v px) is below the diff (at %v px)", w.Finding, w.Top, w.DiffTop)
		case w.Marked == 0:
			t.Errorf("%s: its diagram marks no culprit's call", w.Finding)
		}
	}
}

// openReport writes r's index.html to a temporary directory and opens it
// in headless chromium in a 1280 x 900 window, once wait is visible.
func openReport(t *testing.T, r *report.Report, wait string) context.Context {
	t.Helper()
	exe := chromium(t)
	html, err := r.HTML()
	if err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(t.TempDir(), "index.html")
	if err := os.WriteFile(page, html, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := browser(t, exe, 1280, 900)
	if err := chromedp.Do(ctx, chromedp.Navigate("file://"+page)); err != nil {
		t.Fatalf("opening %s in %s: %v", page, exe, err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(wait))); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// keepShot keeps a screenshot as name in $TWICE_ARTIFACTS, or the test's
// temporary directory, and returns its path.
func keepShot(t *testing.T, name string, png []byte) string {
	t.Helper()
	dir := cmp.Or(os.Getenv("TWICE_ARTIFACTS"), t.TempDir())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
