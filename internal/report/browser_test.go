package report_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/chromedp"
)

// chromium finds a headless-capable browser: Debian's chromium first.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium binary: install Debian's chromium (apt-get install chromium) to open index.html in a browser")
	return ""
}

// TestHTMLInBrowser opens the fixture's index.html in headless chromium:
// the matrix renders, a finding's diagram and diff are visible, nothing is
// loaded besides the file, and the console has no errors. The screenshot
// is kept in $TWICE_ARTIFACTS (or the test's temp dir, logged).
func TestHTMLInBrowser(t *testing.T) {
	exe := chromium(t)
	html, err := fixture(t).HTML()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	page := filepath.Join(dir, "index.html")
	if err := os.WriteFile(page, html, 0o644); err != nil {
		t.Fatal(err)
	}
	// A page that does write errors, so the console check is known to
	// catch them.
	noisy := filepath.Join(dir, "noisy.html")
	if err := os.WriteFile(noisy, []byte(`<!DOCTYPE html><title>noisy</title><script>console.error("broken on purpose")</script>`), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx := browser(t, exe, 1400, 1000)

	// Start the tab on ctx itself: a tab started by a call on a derived
	// context closes when that context ends.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting %s: %v", exe, err)
	}
	if errs := consoleErrors(t, ctx, noisy, nil); len(errs) == 0 {
		t.Fatal("a page that calls console.error shows no console error: the check below would prove nothing")
	}

	var rows, pinned int
	var title, diagram, diff string
	var resources []string
	var shot []byte
	errs := consoleErrors(t, ctx, page, func() error {
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#matrix"))); err != nil {
			return err
		}
		var err error
		if title, err = chromedp.Run(ctx, chromedp.Title()); err != nil {
			return err
		}
		if rows, err = chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#matrix tbody tr').length`)); err != nil {
			return err
		}
		if diagram, err = chromedp.Run(ctx, chromedp.Evaluate[string](`(() => { const s = document.querySelector('.finding svg.sequence'); const r = s.getBoundingClientRect(); return r.width > 200 && r.height > 100 ? s.textContent : "" })()`)); err != nil {
			return err
		}
		if diff, err = chromedp.Run(ctx, chromedp.Evaluate[string](`(() => { const p = document.querySelector('.finding pre.diff'); return p && p.getBoundingClientRect().height > 0 ? p.innerText : "" })()`)); err != nil {
			return err
		}
		// Narrowed so the matrix must scroll, and scrolled to its right
		// end, every row still shows its job's name.
		if pinned, err = chromedp.Run(ctx, chromedp.Evaluate[int](`(() => {
			const box = document.querySelector('.scroll'); box.style.width = '500px'; box.scrollLeft = box.scrollWidth;
			if (box.scrollWidth <= box.clientWidth) return -1;
			const left = box.getBoundingClientRect().left;
			return [...document.querySelectorAll('#matrix tbody td.name')].filter(td => td.getBoundingClientRect().left >= left - 1).length })()`)); err != nil {
			return err
		}
		if _, err = chromedp.Run(ctx, chromedp.Evaluate[int](`(() => { const box = document.querySelector('.scroll'); box.style.width = ''; box.scrollLeft = 0; return 0 })()`)); err != nil {
			return err
		}
		if resources, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](`performance.getEntriesByType('resource').map(e => e.name)`)); err != nil {
			return err
		}
		shot, err = chromedp.Run(ctx, chromedp.FullScreenshot(90))
		return err
	})
	art := os.Getenv("TWICE_ARTIFACTS")
	if art == "" {
		art = dir
	}
	if err := os.MkdirAll(art, 0o755); err != nil {
		t.Fatal(err)
	}
	shotPath := filepath.Join(art, "report-index.jpg")
	if err := os.WriteFile(shotPath, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shotPath)

	if title != "twice: idempotency report" {
		t.Errorf("title = %q", title)
	}
	if want := len(fixture(t).Jobs); rows != want {
		t.Errorf("the matrix shows %d rows, want %d jobs", rows, want)
	}
	if pinned != rows {
		t.Errorf("scrolled to the right, %d of %d matrix rows show their job's name (-1: the matrix did not scroll)", pinned, rows)
	}
	if !strings.Contains(diagram, "Queue") || !strings.Contains(diagram, "dies before step") {
		t.Errorf("the first finding's diagram is not visible or lacks the crash: %q", diagram)
	}
	if !strings.Contains(diff, "(-once +twice)") {
		t.Errorf("the first finding's diff is not visible: %q", diff)
	}
	if len(resources) > 0 {
		t.Errorf("the page loads %q: it must be self-contained", resources)
	}
	for _, e := range errs {
		t.Errorf("console: %s", e)
	}
}

// consoleErrors opens file in the tab of ctx, runs check, and returns the
// console's errors and warnings meanwhile.
func consoleErrors(t *testing.T, ctx context.Context, file string, check func() error) []string {
	t.Helper()
	cctx, stop := context.WithCancel(ctx)
	messages := chromedp.Console(cctx)
	var got []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() {
				got = append(got, m.String())
			}
		}
	}()
	if _, err := chromedp.Call(ctx, log.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("enabling the browser log: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("file://"+file)); err != nil {
		t.Fatalf("opening %s: %v", file, err)
	}
	if check != nil {
		if err := check(); err != nil {
			t.Fatalf("checking %s: %v", file, err)
		}
	}
	// Messages arrive asynchronously; a round trip lets the last ones in.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[int](`1`)); err != nil {
		t.Fatal(err)
	}
	stop()
	<-done
	return got
}

// browser is a headless chromium at exe with a window of width x height,
// closed when the test ends; calls on it give up after 90 s.
func browser(t *testing.T, exe string, width, height int) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(width, height))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancel(); cancelTab(); cancelAlloc() })
	return ctx
}
