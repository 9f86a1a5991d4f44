package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Files written by Write, in the report directory.
const (
	FileHTML     = "index.html"
	FileMarkdown = "summary.md"
	FileJUnit    = "junit.xml"
	FileJSON     = "report.json"
)

// JSON renders report.json (see SCHEMA.md).
func (r *Report) JSON() ([]byte, error) {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("[twice] internal: encoding report.json: %w", err)
	}
	return append(data, '\n'), nil
}

// Write renders every file into dir, replacing what was there. It writes
// a temporary directory next to dir and renames it, so a reader never sees
// half a report: dir is the previous report or the whole new one.
func (r *Report) Write(dir string) error {
	files := map[string]func() ([]byte, error){
		FileHTML:     r.HTML,
		FileMarkdown: func() ([]byte, error) { return []byte(r.Markdown()), nil },
		FileJUnit:    r.JUnit,
		FileJSON:     r.JSON,
	}
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("[twice] cannot write the report to %s: %w", dir, err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".new-*")
	if err != nil {
		return fmt.Errorf("[twice] cannot write the report to %s: %w", dir, err)
	}
	fail := func(err error) error {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fail(fmt.Errorf("[twice] cannot write the report to %s: %w", dir, err))
	}
	for name, render := range files {
		data, err := render()
		if err != nil {
			return fail(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, name), data, 0o644); err != nil {
			return fail(fmt.Errorf("[twice] cannot write the report to %s: %w", dir, err))
		}
	}
	// A directory cannot be renamed over a non-empty one: move the old
	// report aside first, then drop it.
	var old string
	if _, err := os.Stat(dir); err == nil {
		old = tmp + ".old"
		if err := os.Rename(dir, old); err != nil {
			return fail(fmt.Errorf("[twice] cannot replace the report in %s: %w", dir, err))
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		if old != "" {
			_ = os.Rename(old, dir)
		}
		return fail(fmt.Errorf("[twice] cannot write the report to %s: %w", dir, err))
	}
	if old != "" {
		_ = os.RemoveAll(old)
	}
	return nil
}
