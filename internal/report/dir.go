package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/owner"
)

// FileMarker is the file twice writes into every report directory it
// makes. A directory holding it, and nothing but report files, is a
// report of twice's that the next run may replace; any other directory
// that exists is the user's, and twice writes nothing into it.
const FileMarker = ".twice-report"

const markerText = "This directory holds a report written by twice report.\n" +
	"A later run given this directory (-o) replaces the report files in it and nothing else;\n" +
	"twice refuses to write into a directory without this file, or one holding files of its own.\n"

// reportFiles are the names twice writes into a report directory.
var reportFiles = []string{FileHTML, FileMarkdown, FileJUnit, FileJSON, FileMarker}

// ErrDirInUse is returned, wrapped, by ClaimDir when another twice run
// holds the directory.
var ErrDirInUse = errors.New("report directory in use by another twice run")

// Dir is a report directory claimed for one run of twice, claimed before
// any check runs so that a path twice may not or cannot write is refused
// while nothing is lost. The claim holds a lock on the directory (on
// systems with flock), so a second run into the same directory is refused
// rather than raced, and a temporary directory beside it, which shows the
// parent is writable and is where Write puts the new report before it
// swaps it in.
type Dir struct {
	path    string
	lock    *os.File
	tmp     string
	created bool
	written bool
	// Note says what Write left that the user should know of (a previous
	// report that could not be removed), or "".
	Note string
}

// ClaimDir claims path for a report: a directory twice makes, an empty
// one, or one holding a previous report of twice's (its FileMarker and
// report files, nothing else). Anything else (a file, a symbolic link, a
// directory of the user's files, a source package, ".") is refused and
// left as it is. The error says which, and is the user's (blame.User).
// Release the Dir when done.
func ClaimDir(path string) (*Dir, error) {
	path = filepath.Clean(path)
	for range 3 {
		d, retry, err := claim(path)
		if err != nil || !retry {
			return d, err
		}
	}
	return nil, blame.Userf("-o %s: %w: it was replaced three times while this run claimed it; wait for the other run, or give this one another -o", path, ErrDirInUse)
}

// claim makes one attempt; retry is true when the directory locked is no
// longer the one at path (another run just swapped its report in).
func claim(path string) (d *Dir, retry bool, err error) {
	d = &Dir{path: path}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, false, cannotWrite(path, err)
		}
		if err := os.Mkdir(path, 0o755); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return nil, true, nil
			}
			return nil, false, cannotWrite(path, err)
		}
		d.created = true
	case err != nil:
		return nil, false, cannotWrite(path, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return nil, false, blame.Userf("-o %s is a symbolic link: twice writes its report only into a directory it made, and leaves %s as it is; name the directory itself, or a new one", path, path)
	case !fi.IsDir():
		return nil, false, blame.Userf("-o %s is a file, not a report directory: twice writes its report only into a directory it made, and leaves %s as it is; name a new directory, e.g. -o %s", path, path, suggest(path))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, false, cannotWrite(path, err)
	}
	locked, err := lockDir(f)
	if err != nil {
		_ = f.Close()
		return nil, false, cannotWrite(path, err)
	}
	if !locked {
		_ = f.Close()
		return nil, false, blame.Userf("-o %s: %w: another twice report is writing into it now; wait for it to finish, or give this run another -o", path, ErrDirInUse)
	}
	d.lock = f
	if same, err := sameDir(f, path); err != nil || !same {
		_ = f.Close()
		return nil, err == nil, err
	}
	if err := ownReport(path); err != nil {
		_ = f.Close()
		return nil, false, err
	}
	// A run killed before it swapped its report in left its temporary
	// directory, marked with its process: gone, it is removed.
	prefix := "." + filepath.Base(path) + ".new-"
	for _, left := range owner.Leftovers(filepath.Dir(path), prefix, owner.Rules{}) {
		_ = os.RemoveAll(left)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(path), prefix+"*")
	if err != nil {
		d.Release()
		return nil, false, cannotWrite(path, err)
	}
	d.tmp = tmp
	if err := os.Chmod(tmp, 0o755); err != nil {
		d.Release()
		return nil, false, cannotWrite(path, err)
	}
	if err := owner.Mark(tmp); err != nil {
		d.Release()
		return nil, false, cannotWrite(path, err)
	}
	if _, err := os.Lstat(filepath.Join(path, FileMarker)); err != nil {
		if err := os.WriteFile(filepath.Join(path, FileMarker), []byte(markerText), 0o644); err != nil {
			d.Release()
			return nil, false, cannotWrite(path, err)
		}
	}
	return d, false, nil
}

// sameDir says whether the directory open as f is still the one at path.
func sameDir(f *os.File, path string) (bool, error) {
	held, err := f.Stat()
	if err != nil {
		return false, cannotWrite(path, err)
	}
	now, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, cannotWrite(path, err)
	}
	return os.SameFile(held, now), nil
}

// ownReport returns nil when the directory at path is empty or holds a
// report of twice's and nothing else, and else an error naming what
// twice did not write.
func ownReport(path string) error {
	entries, err := os.ReadDir(path)
	if err != nil {
		return cannotWrite(path, err)
	}
	var foreign []string
	marked := false
	for _, e := range entries {
		switch {
		case !e.Type().IsRegular() || !slices.Contains(reportFiles, e.Name()):
			foreign = append(foreign, e.Name())
		case e.Name() == FileMarker:
			marked = true
		}
	}
	if len(foreign) == 0 && (marked || len(entries) == 0 || isOldReport(path)) {
		return nil
	}
	what := "files twice did not write"
	if len(foreign) == 0 {
		foreign = names(entries)
		what = "files without the " + FileMarker + " file that marks a report of twice's"
	}
	shown := foreign
	if len(shown) > 3 {
		shown = append(slices.Clone(shown[:3]), fmt.Sprintf("and %d more", len(foreign)-3))
	}
	return blame.Userf("-o %s holds %s (%s): twice writes its report only into a new or empty directory or one holding a report of its own, and leaves %s as it is; name a new directory, e.g. -o %s",
		path, what, strings.Join(shown, ", "), path, suggest(path))
}

// isOldReport says whether the directory holds a report a twice without
// FileMarker wrote: a report.json of this schema's shape, beside report
// files only (checked by the caller).
func isOldReport(path string) bool {
	data, err := os.ReadFile(filepath.Join(path, FileJSON))
	if err != nil {
		return false
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(data, &fields) != nil {
		return false
	}
	for _, k := range []string{"schema", "command", "exit_code", "summary", "jobs"} {
		if _, ok := fields[k]; !ok {
			return false
		}
	}
	return true
}

func names(entries []os.DirEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// suggest is a directory name beside path that a report may take.
func suggest(path string) string {
	if path == "." || path == string(filepath.Separator) {
		return "twice-report"
	}
	return filepath.Join(filepath.Dir(path), "twice-report")
}

func cannotWrite(path string, err error) error {
	return blame.Userf("cannot write the report to %s: %w; nothing was checked: give -o a directory twice can make or write", path, err)
}

// Path is the report directory.
func (d *Dir) Path() string { return d.path }

// Write renders every file of r into the claimed directory, replacing the
// report there. It writes the temporary directory beside it and swaps it
// in, so a reader never sees half a report: the directory holds the
// previous report or the whole new one. When the swap fails, the error
// says where the new report is.
func (d *Dir) Write(r *Report) error {
	if d.written {
		return fmt.Errorf("report directory %s written twice in one run", d.path)
	}
	files := map[string]func() ([]byte, error){
		FileHTML:     r.HTML,
		FileMarkdown: func() ([]byte, error) { return []byte(r.Markdown()), nil },
		FileJUnit:    r.JUnit,
		FileJSON:     r.JSON,
		FileMarker:   func() ([]byte, error) { return []byte(markerText), nil },
	}
	for name, render := range files {
		data, err := render()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d.tmp, name), data, 0o644); err != nil {
			return blame.Userf("cannot write the report to %s: %w", d.tmp, err)
		}
	}
	if err := os.Remove(filepath.Join(d.tmp, owner.File)); err != nil {
		return blame.Userf("cannot write the report to %s: %w", d.tmp, err)
	}
	// A directory cannot be renamed over a non-empty one: move the old
	// report aside first, then drop it.
	old := d.tmp + ".old"
	if err := os.Rename(d.path, old); err != nil {
		return blame.Userf("cannot replace the report in %s: %w; the new report is in %s", d.path, err, d.tmp)
	}
	if err := os.Rename(d.tmp, d.path); err != nil {
		_ = os.Rename(old, d.path)
		return blame.Userf("cannot replace the report in %s: %w; the new report is in %s", d.path, err, d.tmp)
	}
	d.written = true
	// Only what twice wrote goes: a file put into the old report during
	// the run keeps it, and the user is told.
	for _, name := range reportFiles {
		_ = os.Remove(filepath.Join(old, name))
	}
	if err := os.Remove(old); err != nil {
		d.Note = blame.Line("the previous report, moved to %s, holds files twice did not write, so it is kept there: move them and remove it", old)
	}
	return nil
}

// Release gives up the claim: it unlocks the directory and removes the
// temporary directory, and the report directory itself when this run
// made it and wrote no report into it.
func (d *Dir) Release() {
	if d == nil {
		return
	}
	if !d.written {
		_ = os.RemoveAll(d.tmp)
		if d.created {
			_ = os.Remove(filepath.Join(d.path, FileMarker))
			_ = os.Remove(d.path)
		}
	}
	if d.lock != nil {
		_ = d.lock.Close()
		d.lock = nil
	}
}

// Write renders every file into dir, replacing the report there: it
// claims dir (ClaimDir), writes the report and releases the claim. A dir
// twice may not write is refused as ClaimDir says.
func (r *Report) Write(dir string) error {
	d, err := ClaimDir(dir)
	if err != nil {
		return err
	}
	defer d.Release()
	return d.Write(r)
}
