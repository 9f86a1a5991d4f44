package main

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/runtwice/twice/harness"
)

// TestReadmeSample runs the README's first snippet (its first Go block,
// under "Check a job") as a user would, with go test, and compares what
// go test prints with the sample the README shows under it, so the sample
// cannot go stale. In the sample, "..." in a line stands for any text,
// and a line of "..." alone for any lines; durations and the package's
// directory are the README's.
func TestReadmeSample(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	at := strings.Index(text, "## Check a job")
	if at < 0 {
		t.Fatal(`the README has no "## Check a job" section`)
	}
	blocks := regexp.MustCompile("(?s)```(go)?\n(.*?)```").FindAllStringSubmatch(text[at:], 2)
	if len(blocks) < 2 || blocks[0][1] != "go" {
		t.Fatalf("the README's Check a job section lacks a Go snippet followed by its output")
	}
	snippet, sample := blocks[0][2], blocks[1][2]

	dir, err := os.MkdirTemp("testdata", "readme-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "reward_test.go"), []byte(snippet), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "test", "-count=1", "./"+filepath.ToSlash(dir))
	// As a user of the README runs it: evidence kept (this package's tests
	// turn that off for themselves), on the local server binaries the
	// README's sample is printed with. A URL server would keep the
	// database on that server instead of dumping it (another line), and
	// leave it behind there.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, harness.KeepEnv+"=") && !strings.HasPrefix(kv, "TWICE_POSTGRES=") && !strings.HasPrefix(kv, "TWICE_DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "TWICE_POSTGRES=local")
	out, _ := cmd.CombinedOutput()
	got := string(out)
	for _, dump := range regexp.MustCompile(`dumped to (\S+)\.sql:`).FindAllStringSubmatch(got, -1) {
		_ = os.Remove(dump[1] + ".sql")
		_ = os.Remove(filepath.Dir(dump[1]))
	}
	got = strings.ReplaceAll(got, "./cmd/twice/twice-core/"+filepath.ToSlash(dir), "./loyalty")
	end := strings.Index(got, "\nFAIL\n")
	if end < 0 {
		t.Fatalf("go test of the README's snippet did not fail as the README says:\n%s", got)
	}
	got = normalizeSample(got[:end+1])
	want := normalizeSample(sample)
	if !sampleMatches(want, got) {
		t.Errorf("the README's sample output is stale; go test prints:\n%s\nthe README shows:\n%s", got, want)
	}
}

var testDuration = regexp.MustCompile(`\(\d+(\.\d+)?s\)`)

// normalizeSample drops trailing blanks and makes durations alike.
func normalizeSample(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = testDuration.ReplaceAllString(strings.TrimRight(l, " \t"), "(0.62s)")
	}
	return strings.Join(lines, "\n") + "\n"
}

// sampleMatches reports whether got is want with its "..." filled in.
func sampleMatches(want, got string) bool {
	var re strings.Builder
	re.WriteString(`\A`)
	for _, l := range strings.SplitAfter(want, "\n") {
		if l == "" {
			continue
		}
		if strings.TrimSpace(l) == "..." {
			re.WriteString(`(?:.*\n)*?`)
			continue
		}
		parts := strings.Split(l, "...")
		for i := range parts {
			parts[i] = regexp.QuoteMeta(parts[i])
		}
		re.WriteString(strings.Join(parts, `.*?`))
	}
	re.WriteString(`\z`)
	return regexp.MustCompile(re.String()).MatchString(got)
}

// TestReadmeGoBlocks holds every Go block of the README, and of each
// adapter's README, to code that compiles, so no snippet drifts from the
// API it shows. A block that is a whole file (it starts with "package")
// must be in the README and is vetted as a package of this module; any
// other block must appear as it is, at the start of a line and with any
// indentation of tabs, in a Go file of a module that go.work lists, all
// of which .ci/run vets and tests: copy the snippet from that code.
func TestReadmeGoBlocks(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	docs := []string{"README.md"}
	adapters, err := filepath.Glob(filepath.Join(root, "adapters", "*", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range adapters {
		rel, err := filepath.Rel(root, a)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, filepath.ToSlash(rel))
	}
	sources := workspaceSources(t, root)

	dir, err := os.MkdirTemp("testdata", "readme-vet-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var vet []string
	for _, doc := range docs {
		text, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		blocks := goBlocks(string(text))
		if doc == "README.md" && len(blocks) == 0 {
			t.Fatal("the README has no Go block: the pattern that finds them is broken")
		}
		for _, b := range blocks {
			if strings.HasPrefix(b.text, "package ") {
				if doc != "README.md" {
					t.Errorf("%s:%d: a whole-file Go block is vetted only in the README; show a part of the adapter's example instead", doc, b.line)
					continue
				}
				pkg := filepath.Join(dir, fmt.Sprintf("line%d", b.line))
				name := "block.go"
				if strings.Contains(b.text, "\nfunc Test") {
					name = "block_test.go"
				}
				if err := os.MkdirAll(pkg, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(pkg, name), []byte(b.text), 0o644); err != nil {
					t.Fatal(err)
				}
				vet = append(vet, "./"+filepath.ToSlash(pkg))
				continue
			}
			if at := verbatimIn(sources, b.text); at != "" {
				t.Logf("%s:%d: in %s", doc, b.line, at)
			} else {
				t.Errorf("%s:%d: this Go block is in no Go file of the workspace; copy it from the code it shows, or make it a whole file:\n%s", doc, b.line, b.text)
			}
		}
	}
	if len(vet) == 0 {
		return
	}
	out, err := exec.Command("go", append([]string{"vet"}, vet...)...).CombinedOutput()
	if err != nil {
		t.Errorf("go vet of the README's whole-file Go blocks (the directory is named after the block's line): %v\n%s", err, out)
	}
}

type goBlock struct {
	line int // of the opening fence, from 1
	text string
}

// goBlocks returns the Markdown's ```go blocks, each without the
// indentation of its fence (a block inside a list item).
func goBlocks(md string) []goBlock {
	var blocks []goBlock
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go" {
			continue
		}
		indent := lines[i][:len(lines[i])-len(strings.TrimLeft(lines[i], " \t"))]
		b := goBlock{line: i + 1}
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			b.text += strings.TrimPrefix(lines[i], indent) + "\n"
		}
		blocks = append(blocks, b)
	}
	return blocks
}

// workspaceSources reads the Go files of every module go.work lists, as
// the go command sees them: not under testdata, nor under a directory
// whose name starts with "." or "_", nor in a nested module go.work
// does not list.
func workspaceSources(t *testing.T, root string) map[string]string {
	t.Helper()
	work, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	modules := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*(\./\S*|\.)\s*$`).FindAllStringSubmatch(string(work), -1) {
		modules[filepath.Clean(m[1])] = true
	}
	if !modules["."] || !modules[filepath.Join("adapters", "nats")] {
		t.Fatalf("go.work lists the modules %v, which lack the root or adapters/nats: the pattern that reads it is broken", modules)
	}
	sources := map[string]string{}
	err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if e.IsDir() {
			name := e.Name()
			if rel != "." && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return fs.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && !modules[rel] {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sources[filepath.ToSlash(rel)] = string(src)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sources
}

// verbatimIn returns the file of sources that holds block at the start of
// a line, its non-empty lines indented by zero to three tabs alike, or "".
func verbatimIn(sources map[string]string, block string) string {
	files := make([]string, 0, len(sources))
	for f := range sources {
		files = append(files, f)
	}
	slices.Sort(files)
	for _, indent := range []string{"", "\t", "\t\t", "\t\t\t"} {
		lines := strings.SplitAfter(block, "\n")
		for i, l := range lines {
			if strings.TrimSpace(l) != "" {
				lines[i] = indent + l
			}
		}
		want := strings.Join(lines, "")
		for _, f := range files {
			src := sources[f]
			for from := 0; ; {
				at := strings.Index(src[from:], want)
				if at < 0 {
					break
				}
				if at += from; at == 0 || src[at-1] == '\n' {
					return f
				}
				from = at + 1
			}
		}
	}
	return ""
}
