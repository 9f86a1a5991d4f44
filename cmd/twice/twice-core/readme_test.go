package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
