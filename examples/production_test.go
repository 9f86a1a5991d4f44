// Package examples_test holds the rule every example keeps: job code is
// production code. It never imports twice; only its _test.go files do,
// and they wire the harness's pool, fakes and clock into the job's own
// interfaces (DESIGN section 3).
package examples_test

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
)

const (
	twiceModule   = "github.com/runtwice/twice"
	examplesPaths = twiceModule + "/examples/"
)

// adapterExample matches the import paths of the adapters' examples.
var adapterExample = regexp.MustCompile(`^` + regexp.QuoteMeta(twiceModule) + `/adapters/[^/]+/example/`)

// goImports calls visit with every import of the Go files under fsys
// (test files too when tests is set), and returns the directories it
// read.
func goImports(fsys fs.FS, tests bool, visit func(file, imp string)) (dirs []string, err error) {
	err = fs.WalkDir(fsys, ".", func(name string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		base := path.Base(name)
		if e.IsDir() {
			// The go command ignores these directories too.
			if name != "." && (base == "testdata" || strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_")) {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || (!tests && strings.HasSuffix(name, "_test.go")) {
			return nil
		}
		src, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
		if err != nil {
			return err
		}
		if dir := path.Dir(name); !slices.Contains(dirs, dir) {
			dirs = append(dirs, dir)
		}
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: import %s: %w", name, imp.Path.Value, err)
			}
			visit(name, p)
		}
		return nil
	})
	return dirs, err
}

// twiceImports returns, one line each, the non-test Go files under fsys
// that import a twice package, and the directories it checked. Imports of
// other examples, the adapters' included, are allowed: they are job code
// too, and checked here.
func twiceImports(fsys fs.FS) (bad, dirs []string, err error) {
	dirs, err = goImports(fsys, false, func(file, p string) {
		example := strings.HasPrefix(p, examplesPaths) || adapterExample.MatchString(p)
		if (p == twiceModule || strings.HasPrefix(p, twiceModule+"/")) && !example {
			bad = append(bad, fmt.Sprintf("%s imports %s", file, p))
		}
	})
	return bad, dirs, err
}

// internalImports returns, one line each, the Go files under fsys, tests
// included, that import an internal package of twice's, which a user of
// twice cannot import. An example's own internal packages are its own.
func internalImports(fsys fs.FS) (bad []string, err error) {
	_, err = goImports(fsys, true, func(file, p string) {
		own := strings.HasPrefix(p, examplesPaths) || adapterExample.MatchString(p)
		if !own && strings.HasPrefix(p, twiceModule+"/") && slices.Contains(strings.Split(p, "/"), "internal") {
			bad = append(bad, fmt.Sprintf("%s imports %s", file, p))
		}
	})
	return bad, err
}

// TestExamplesImportNothingInternal: the examples, tests included, and
// the adapters' examples show what a user of twice can write, so they
// import no internal package (a long test's gate is
// harness.SkipUnlessLong).
func TestExamplesImportNothingInternal(t *testing.T) {
	roots := []string{"."}
	adapters, err := filepath.Glob("../adapters/*/example")
	if err != nil {
		t.Fatal(err)
	}
	if len(adapters) < 6 {
		t.Fatalf("found the adapters' examples %q, fewer than six: the pattern is broken", adapters)
	}
	for _, root := range append(roots, adapters...) {
		bad, err := internalImports(os.DirFS(root))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bad {
			t.Errorf("%s/%s: an example imports nothing a user of twice cannot; use the public API", filepath.ToSlash(root), b)
		}
	}
}

// TestJobCodeDoesNotImportTwice: no job package under examples/ (the
// nested driver module included) imports twice outside its tests.
func TestJobCodeDoesNotImportTwice(t *testing.T) {
	bad, dirs, err := twiceImports(os.DirFS("."))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Errorf("examples/%s: job code in examples/ is production code and must not import twice (DESIGN section 3); give the job an interface of its own (a mailer, a payer, a clock) and wire the harness's fakes into it in a _test.go file", b)
	}
	// The walk must have reached the jobs that call systems outside the
	// database, the ones that would be tempted to take a *harness.Delivery.
	for _, want := range []string{"creditnotice", "payouts", "receipts", "drivers"} {
		if !slices.ContainsFunc(dirs, func(d string) bool { return d == want || strings.HasPrefix(d, want+"/") }) {
			t.Errorf("checked the directories %q, which lack %q: the walk missed job code", dirs, want)
		}
	}
}

// TestAdapterExamplesDoNotImportTwice: each queue adapter ships a
// production example under adapters/<queue>/example (a nested module, so
// ./... here does not build it), and that job code never imports twice
// either, not even its own adapter: only its tests do.
func TestAdapterExamplesDoNotImportTwice(t *testing.T) {
	entries, err := os.ReadDir("../adapters")
	if err != nil {
		t.Fatal(err)
	}
	var checked []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		root := path.Join("../adapters", e.Name(), "example")
		if _, err := os.Stat(root); err != nil {
			t.Errorf("adapters/%s has no example/: every queue adapter ships production job code that it checks (%v)", e.Name(), err)
			continue
		}
		bad, dirs, err := twiceImports(os.DirFS(root))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bad {
			t.Errorf("adapters/%s/example/%s: an adapter's example is production job code and must not import twice (DESIGN section 3); wire the adapter in its _test.go files", e.Name(), b)
		}
		if len(dirs) == 0 {
			t.Errorf("adapters/%s/example holds no job code outside its tests", e.Name())
		}
		checked = append(checked, e.Name())
	}
	for _, want := range []string{"asynq", "gue", "river", "watermill"} {
		if !slices.Contains(checked, want) {
			t.Errorf("checked the adapters %q, which lack %q", checked, want)
		}
	}
}

// The check itself finds what it should, and only that.
func TestTwiceImportsFindsHarness(t *testing.T) {
	file := func(imports ...string) *fstest.MapFile {
		src := "package p\n\nimport (\n"
		for _, imp := range imports {
			src += "\t" + imp + "\n"
		}
		return &fstest.MapFile{Data: []byte(src + ")\n")}
	}
	fsys := fstest.MapFS{
		"jobs/job.go":           file(`"context"`, `h "github.com/runtwice/twice/harness"`),
		"jobs/job_test.go":      file(`"github.com/runtwice/twice/harness"`),
		"jobs/uses_other.go":    file(`"github.com/runtwice/twice/examples/loyalty"`),
		"jobs/uses_adapter.go":  file(`"github.com/runtwice/twice/adapters/kafka/example/ledger"`),
		"root/root.go":          file(`"github.com/runtwice/twice"`),
		"nested/sub/clock.go":   file(`_ "github.com/runtwice/twice/faults"`),
		"nested/testdata/x.go":  file(`"github.com/runtwice/twice/harness"`),
		"other/other.go":        file(`"github.com/runtwice/twicefold"`),
		"other/README.md":       {Data: []byte(`import "github.com/runtwice/twice/harness"`)},
		"jobs/.hidden/stray.go": file(`"github.com/runtwice/twice/assert"`),
	}
	bad, _, err := twiceImports(fsys)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"jobs/job.go imports github.com/runtwice/twice/harness",
		"nested/sub/clock.go imports github.com/runtwice/twice/faults",
		"root/root.go imports github.com/runtwice/twice",
	}
	if !slices.Equal(bad, want) {
		t.Errorf("twiceImports found\n%s\nwant\n%s", strings.Join(bad, "\n"), strings.Join(want, "\n"))
	}

	fsys["jobs/long_test.go"] = file(`"github.com/runtwice/twice/internal/longtest"`)
	fsys["jobs/nested/own.go"] = file(`"github.com/runtwice/twice/examples/jobs/internal/clock"`)
	fsys["jobs/queue_test.go"] = file(`"github.com/runtwice/twice/adapters/river/example/points/internal/ledger"`, `"github.com/runtwice/twice/adapters/river/internal/x"`)
	fsys["jobs/internalish.go"] = file(`"github.com/runtwice/twice/internalish"`)
	bad, err = internalImports(fsys)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{
		"jobs/long_test.go imports github.com/runtwice/twice/internal/longtest",
		"jobs/queue_test.go imports github.com/runtwice/twice/adapters/river/internal/x",
	}
	if !slices.Equal(bad, want) {
		t.Errorf("internalImports found\n%s\nwant\n%s", strings.Join(bad, "\n"), strings.Join(want, "\n"))
	}
}
